"""Tenant key routes, mounted under /api/."""

from rest_framework.routers import SimpleRouter

from controlplane.access.api import TenantKeyViewSet

router = SimpleRouter()
router.register("tenant-keys", TenantKeyViewSet, basename="tenant-key")

urlpatterns = router.urls
