"""Routes under /api/plans/: plans, their actions, re-plan runs and what-if previews."""

from rest_framework.routers import SimpleRouter

from controlplane.plans.api import PlanViewSet, ReplanRunViewSet
from controlplane.plans.whatif_api import WhatIfViewSet

router = SimpleRouter()
# Runs first: the plan routes' empty prefix would otherwise be tried before "runs/".
router.register("runs", ReplanRunViewSet, basename="plan-run")
router.register("what-ifs", WhatIfViewSet, basename="plan-what-if")
router.register("", PlanViewSet, basename="plan")

urlpatterns = router.urls
