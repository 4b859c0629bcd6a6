"""Telemetry endpoints, mounted at ``/api/telemetry/``."""

from rest_framework.routers import SimpleRouter

from controlplane.telemetry import api

router = SimpleRouter()
router.register("pulls", api.TelemetryPullViewSet, basename="telemetry-pull")
router.register("derivations", api.ProfileDerivationViewSet, basename="telemetry-derivation")
router.register("observations", api.ObservedWorkloadViewSet, basename="telemetry-observation")
router.register("profiles", api.TelemetryProfileViewSet, basename="telemetry-profile")
router.register("series", api.TelemetrySeriesViewSet, basename="telemetry-series")
router.register("alerts", api.DriftAlertViewSet, basename="drift-alert")
router.register("pool-alerts", api.PoolDriftAlertViewSet, basename="pool-drift-alert")
router.register("pool-signal-alerts", api.PoolSignalAlertViewSet, basename="pool-signal-alert")

urlpatterns = router.urls
