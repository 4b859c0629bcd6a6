"""The browsable API docs (Swagger UI) served entirely by Headroom.

Swagger UI's scripts and stylesheet come from the ``drf-spectacular-sidecar`` package and are
served by ``swagger_ui_asset``, so the page works on a machine without internet access and
without ``collectstatic``. The online spec validator badge is switched off for the same reason.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import drf_spectacular_sidecar
from django.http import FileResponse, Http404, HttpRequest
from django.urls import reverse
from django.views.decorators.http import require_GET
from drf_spectacular.settings import spectacular_settings
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularSwaggerView
from rest_framework.request import Request
from rest_framework.response import Response

SWAGGER_UI_DIR = (
    Path(drf_spectacular_sidecar.__file__).resolve().parent
    / "static"
    / "drf_spectacular_sidecar"
    / "swagger-ui-dist"
)
# The files the page loads, with their content types; nothing else is served.
SWAGGER_UI_FILES = {
    "swagger-ui.css": "text/css",
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui-standalone-preset.js": "text/javascript",
    "favicon-32x32.png": "image/png",
}


class SwaggerUIView(SpectacularSwaggerView):
    @staticmethod
    def _swagger_ui_resource(filename: str) -> str:
        return reverse("api-docs-asset", kwargs={"filename": filename})

    @staticmethod
    def _swagger_ui_favicon() -> str:
        return reverse("api-docs-asset", kwargs={"filename": "favicon-32x32.png"})

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        # drf-spectacular leaves this view's get() unannotated.
        response: Response = super().get(request, *args, **kwargs)  # type: ignore[no-untyped-call]
        ui_settings = spectacular_settings.SWAGGER_UI_SETTINGS
        if isinstance(ui_settings, dict):
            response.data["settings"] = json.dumps({**ui_settings, "validatorUrl": None})
        return response


@require_GET
def swagger_ui_asset(request: HttpRequest, filename: str) -> FileResponse:
    content_type = SWAGGER_UI_FILES.get(filename)
    if content_type is None:
        raise Http404(filename)
    response = FileResponse((SWAGGER_UI_DIR / filename).open("rb"), content_type=content_type)
    response["Cache-Control"] = "public, max-age=86400"
    return response
