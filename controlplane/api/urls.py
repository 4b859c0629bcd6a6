"""API routes: one endpoint per record type, tokens, the OpenAPI schema and its docs page."""

from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView
from rest_framework.routers import DefaultRouter

from controlplane.api import viewsets
from controlplane.api.auth import AuthTokenView
from controlplane.api.docs import SwaggerUIView, swagger_ui_asset
from controlplane.api.roots import HeadroomAPIRoot

router = DefaultRouter()
# The root links the plans, telemetry, emission and benchmarks parts too.
router.APIRootView = HeadroomAPIRoot
router.register("geographies", viewsets.GeographyViewSet, basename="geography")
router.register("regions", viewsets.RegionViewSet, basename="region")
router.register("zones", viewsets.ZoneViewSet, basename="zone")
router.register("region-links", viewsets.RegionLinkViewSet, basename="region-link")
router.register("hosted-providers", viewsets.HostedProviderViewSet, basename="hosted-provider")
router.register("accelerators", viewsets.AcceleratorTypeViewSet, basename="accelerator")
router.register("inventory", viewsets.ZoneInventoryViewSet, basename="inventory")
router.register("models", viewsets.LlmModelViewSet, basename="model")
router.register("shapes", viewsets.ReplicaShapeViewSet, basename="shape")
router.register("capacity-figures", viewsets.CapacityFigureViewSet, basename="capacity-figure")
router.register("workload-classes", viewsets.WorkloadClassViewSet, basename="workload-class")
router.register("tiers", viewsets.TierViewSet, basename="tier")
router.register("tenants", viewsets.TenantViewSet, basename="tenant")
router.register("tenant-quotas", viewsets.TenantQuotaViewSet, basename="tenant-quota")
router.register("workload-profiles", viewsets.WorkloadProfileViewSet, basename="workload-profile")

urlpatterns = [
    path("auth/token/", AuthTokenView.as_view(), name="auth-token"),
    # Session login and logout pages for the browsable API (any user, not only staff).
    path("auth/", include("rest_framework.urls", namespace="rest_framework")),
    path("schema/", SpectacularAPIView.as_view(), name="schema"),
    path("docs/", SwaggerUIView.as_view(url_name="schema"), name="api-docs"),
    path("docs/assets/<str:filename>", swagger_ui_asset, name="api-docs-asset"),
    *router.urls,
]
