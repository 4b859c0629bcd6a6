"""Benchmark API routes (runs, benchmark endpoints, freshness), mounted at ``/api/benchmarks/``."""

from rest_framework.routers import SimpleRouter

from controlplane.benchmarks import api

router = SimpleRouter()
router.register("runs", api.BenchmarkRunViewSet, basename="benchmark-run")
router.register("endpoints", api.BenchmarkEndpointViewSet, basename="benchmark-endpoint")
router.register("freshness", api.FreshnessViewSet, basename="benchmark-freshness")

urlpatterns = router.urls
