"""Routes under /api/plans/: plans, their actions, and re-plan runs."""

from rest_framework.routers import SimpleRouter

from controlplane.plans.api import PlanViewSet, ReplanRunViewSet

router = SimpleRouter()
# Runs first: the plan routes' empty prefix would otherwise be tried before "runs/".
router.register("runs", ReplanRunViewSet, basename="plan-run")
router.register("", PlanViewSet, basename="plan")

urlpatterns = router.urls
