"""CSV from the same endpoints as JSON: ``?format=csv`` or ``Accept: text/csv``.

A finance report's body is ``{"columns": [...], "rows": [...], ...}``; the CSV is its rows, one
line each, under a header of ``columns`` in that order (stable: the documented column names).
Empty cells are values the JSON gives as null.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping
from typing import Any

from rest_framework.renderers import BaseRenderer

from controlplane.core.renderers import RenderedOnceMixin


class CSVRenderer(BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\r\n")
        if not isinstance(data, Mapping) or "rows" not in data:
            return b""
        columns = list(data.get("columns") or (data["rows"][0].keys() if data["rows"] else []))
        writer.writerow(columns)
        for row in data["rows"]:
            writer.writerow(["" if row.get(c) is None else row.get(c) for c in columns])
        return out.getvalue().encode(self.charset)


class ReportCSVRenderer(RenderedOnceMixin, CSVRenderer):
    """The CSV of a stored report, rendered once per process (``core.renderers``)."""
