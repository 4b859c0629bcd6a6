"""URL map: admin UI, REST API under /api/, OpenAPI schema and docs."""

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/telemetry/", include("controlplane.telemetry.urls")),
    path("api/emission/", include("controlplane.emission.urls")),
    path("api/plans/", include("controlplane.plans.urls")),
    path("api/benchmarks/", include("controlplane.benchmarks.urls")),
    path("api/finance/", include("controlplane.finance.urls")),
    path("api/", include("controlplane.api.urls")),
]
