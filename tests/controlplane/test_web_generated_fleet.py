"""Every operators' page on the generated 200-tenant, 12-region fleet, as each role."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from benchmarks.bench_replan import load_generated
from controlplane.core.roles import FINANCE, POLICY_ADMIN, VIEWER
from controlplane.plans.models import Plan
from controlplane.policies.models import Tenant
from planner.placement.generator import generate_problem
from tests.controlplane.plans_helpers import run_replan

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


def test_every_page_renders_on_the_generated_fleet(role_users: dict[str, User | None]) -> None:
    load_generated(
        generate_problem(tenants=200, regions=12, zones_per_region=3, gpu_types=3, seed=7)
    )
    run = run_replan()
    assert run.plan is not None and run.plan.state == Plan.State.ACTIVE
    tenant = Tenant.objects.order_by("name").first()
    assert tenant is not None
    urls = [
        "/",
        "/plans/",
        f"/plans/v{run.plan.version}/",
        "/tenants/",
        "/tenants/?page=2",
        f"/tenants/{tenant.name}/",
        "/what-if/",
        f"/what-if/?tenant={tenant.name}",
        "/drift/?status=all",
        "/finance/",
    ]
    for role in (POLICY_ADMIN, FINANCE, VIEWER):
        client = Client()
        client.force_login(role_users[role])
        for url in urls:
            response = client.get(url)
            assert response.status_code == 200, (role, url)
    body = client.get("/").content.decode()
    assert body.count('class="region"') == 12
    plan_page = client.get(f"/plans/v{run.plan.version}/").content.decode()
    assert plan_page.count("data-key=") >= 200
