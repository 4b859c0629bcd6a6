"""Renderers that render a response body once per process when it never changes.

A view whose body is built from an object that is never changed once made (a stored finance
report, shared by every request through a ``RowMemo``) marks the response with it:
``response.rendered_from = report``. A renderer with ``RenderedOnceMixin`` then renders that
body once per variant (media type with its parameters, indent) and serves the same bytes to
every later request for the same object, instead of encoding a megabyte of JSON each time.
Responses without the mark are rendered as usual.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework.renderers import BaseRenderer, JSONRenderer

from controlplane.core.memo import IdentityMemo

# Rendered bodies: a finance report is up to about a megabyte, so a few dozen per process.
RENDERED: IdentityMemo[bytes] = IdentityMemo(size=32)


class RenderedOnceMixin(BaseRenderer):
    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        context = renderer_context or {}
        source = getattr(context.get("response"), "rendered_from", None)
        render = super().render
        if source is None:
            return render(data, accepted_media_type, renderer_context)  # type: ignore[no-any-return]
        variant = (type(self).__qualname__, accepted_media_type or "", context.get("indent"))
        return RENDERED.get(
            source, variant, lambda: render(data, accepted_media_type, renderer_context)
        )


class RenderedOnceJSONRenderer(RenderedOnceMixin, JSONRenderer):
    """DRF's JSON renderer, rendering a marked response's body once."""
