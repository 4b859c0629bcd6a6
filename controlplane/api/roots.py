"""Browsable roots: ``/api/`` links every part of the API (records, plans, telemetry, emission,
benchmarks, docs), and ``/api/telemetry/`` and ``/api/benchmarks/`` list their endpoints."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from django.urls import NoReverseMatch
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse
from rest_framework.routers import APIRootView

# Parts of the API mounted outside the record router, by the name of their list route.
PARTS = {
    "plans": "plan-list",
    "plan-runs": "plan-run-list",
    "telemetry": "telemetry-root",
    "emission-sinks": "allocation-sink-list",
    "emission-outbox": "outbox-entry-list",
    "benchmarks": "benchmarks-root",
    "schema": "schema",
    "docs": "api-docs",
    "token": "auth-token",
    "tenant-keys": "tenant-key-list",
}
TELEMETRY = {
    "pulls": "telemetry-pull-list",
    "derivations": "telemetry-derivation-list",
    "observations": "telemetry-observation-list",
    "profiles": "telemetry-profile-list",
    "series": "telemetry-series-list",
    "alerts": "drift-alert-list",
}
BENCHMARKS = {
    "runs": "benchmark-run-list",
    "endpoints": "benchmark-endpoint-list",
    "freshness": "benchmark-freshness-list",
}


def _links(request: Request, names: dict[str, str], kwargs: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = OrderedDict()
    for key, url_name in names.items():
        try:
            out[key] = reverse(url_name, request=request, format=kwargs.get("format"))
        except NoReverseMatch:
            continue  # a part whose app is not installed
    return out


@extend_schema(exclude=True)
class HeadroomAPIRoot(APIRootView):
    """The record endpoints, then every other part of the API."""

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        response = super().get(request, *args, **kwargs)
        response.data.update(_links(request, PARTS, kwargs))
        return response


@extend_schema(exclude=True)
class PartRoot(APIRootView):
    """The endpoints of one part of the API, by name."""

    links: dict[str, str] = {}

    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return Response(_links(request, self.links, kwargs))


telemetry_root = PartRoot.as_view(links=TELEMETRY)
benchmarks_root = PartRoot.as_view(links=BENCHMARKS)
