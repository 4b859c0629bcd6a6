"""Request body parsing that turns every malformed body into a 400, never a 500.

DRF's JSON parser catches ``ValueError`` only: a body nested deeper than Python's recursion
limit raises ``RecursionError``, and a number literal such as ``1e999`` silently becomes
``inf``, which no database column or JSON document can store. This parser refuses both as
parse errors, as it refuses the ``NaN`` and ``Infinity`` constants.
"""

from __future__ import annotations

import codecs
import json
import math
from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser
from rest_framework.utils.json import strict_constant


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise ValueError(f"number {literal[:40]} is out of range")
    return value


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
            return json.load(reader, parse_float=_finite_float, parse_constant=strict_constant)
        except RecursionError as exc:
            raise ParseError("JSON parse error - the document is nested too deeply.") from exc
        except ValueError as exc:  # includes UnicodeDecodeError and JSONDecodeError
            raise ParseError(f"JSON parse error - {exc}") from exc
