"""Emission routes, under /api/emission/: sinks, the outbox and the shadow-mode diffs."""

from rest_framework.routers import DefaultRouter

from controlplane.emission import api

router = DefaultRouter()
router.register("sinks", api.AllocationSinkViewSet, basename="allocation-sink")
router.register("outbox", api.OutboxEntryViewSet, basename="outbox-entry")
router.register("shadow-diffs", api.ShadowDiffViewSet, basename="shadow-diff")

urlpatterns = router.urls
