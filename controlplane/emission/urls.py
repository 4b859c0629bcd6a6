"""Emission routes, under /api/emission/: sinks and the outbox."""

from rest_framework.routers import DefaultRouter

from controlplane.emission import api

router = DefaultRouter()
router.register("sinks", api.AllocationSinkViewSet, basename="allocation-sink")
router.register("outbox", api.OutboxEntryViewSet, basename="outbox-entry")

urlpatterns = router.urls
