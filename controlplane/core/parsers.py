"""Request body parsing that turns every malformed body into a 400, never a 500.

DRF's JSON parser catches ``ValueError`` only: a body nested deeper than Python's recursion
limit raises ``RecursionError``, and a number literal such as ``1e999`` silently becomes
``inf``, which no database column or JSON document can store. This parser refuses both as
parse errors, as it refuses the ``NaN`` and ``Infinity`` constants. A string holding a lone
surrogate (JSON allows ``"\\ud800"``; UTF-8 cannot encode it, so neither the database nor the
error response could) is refused as a 400 naming the field that carries it.
"""

from __future__ import annotations

import codecs
import json
import math
import re
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.parsers import DataAndFiles, JSONParser, MultiPartParser
from rest_framework.utils.json import strict_constant


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"number {literal[:40]} is out of range")
    return value


_SURROGATES = re.compile("[\ud800-\udfff]")
LONE_SURROGATE = (
    "Not valid Unicode text: it holds a lone surrogate code point (U+D800 to U+DFFF), "
    "which is half of a character."
)


def _surrogate_path(value: Any, path: str) -> str | None:
    """The path (``field``, ``field[2]``, ``field.key``) of the first string, or key, that
    holds a lone surrogate; None when there is none."""
    if isinstance(value, str):
        return path if _SURROGATES.search(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if _SURROGATES.search(key):
                return here.encode("utf-8", "backslashreplace").decode("utf-8")
            found = _surrogate_path(item, here)
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _surrogate_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


class StrictJSONParser(JSONParser):
    """JSON bodies with finite numbers only; any decoding failure is a ``ParseError``."""

    def parse(
        self,
        stream: IO[bytes],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            reader = codecs.getreader(encoding)(stream)
            document = json.load(reader, parse_float=_finite_float, parse_constant=strict_constant)
        except RecursionError as exc:
            raise ParseError("JSON parse error - the document is nested too deeply.") from exc
        except ValueError as exc:  # includes UnicodeDecodeError and JSONDecodeError
            raise ParseError(f"JSON parse error - {exc}") from exc
        where = _surrogate_path(document, "")
        if where is not None:
            raise ValidationError({where or "non_field_errors": [LONE_SURROGATE]})
        return document


class StrictMultiPartParser(MultiPartParser):
    """A multipart body that holds bytes but no part (no boundary the parser could find) is a
    ``ParseError``, not an empty form that a partial update would take as "change nothing"."""

    def parse(
        self,
        stream: IO[bytes],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> DataAndFiles[Any, Any]:
        parsed = super().parse(stream, media_type, parser_context)
        request = (parser_context or {}).get("request")
        meta = getattr(request, "META", {})
        try:
            length = int(meta.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if not parsed.data and not parsed.files and length > 0:
            raise ParseError("Multipart parse error - the body holds no part.")
        return parsed
