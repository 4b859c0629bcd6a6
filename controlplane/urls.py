"""URL map: the operators' pages at /, admin UI, REST API under /api/, OpenAPI schema and docs."""

from django.contrib import admin
from django.urls import include, path

from controlplane.api.roots import benchmarks_root, telemetry_root
from controlplane.web.views import favicon

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/telemetry/", telemetry_root, name="telemetry-root"),
    path("api/telemetry/", include("controlplane.telemetry.urls")),
    path("api/emission/", include("controlplane.emission.urls")),
    path("api/plans/", include("controlplane.plans.urls")),
    path("api/benchmarks/", benchmarks_root, name="benchmarks-root"),
    path("api/benchmarks/", include("controlplane.benchmarks.urls")),
    path("api/finance/", include("controlplane.finance.urls")),
    path("api/", include("controlplane.access.urls")),
    path("api/", include("controlplane.api.urls")),
    path("favicon.ico", favicon, name="favicon"),
    path("", include("controlplane.web.urls")),
]
