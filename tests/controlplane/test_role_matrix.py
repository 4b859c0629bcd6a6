"""The role matrix in docs/api.md, walked against the API, cell by cell.

The table is read from the document itself, so the document cannot drift from the API: each
row names records and an operation, each column a caller (the three roles, a read-write tenant
key, a user with no role, nobody), and each cell what that caller gets (``all``, ``own``,
``yes``, ``403``, ``401``; the document's legend says what they mean). Every row has a probe
below that makes the requests and tells which of these the API answered; a row the test has
no probe for fails, so does a probe no row uses, and so does a writable field of a tenant or a
quota that no row names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.urls import resolve, reverse
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.access.models import TenantKey
from controlplane.api.serializers import TenantQuotaSerializer, TenantSerializer
from controlplane.plans.models import Plan
from controlplane.policies.models import Tenant, TenantQuota, Tier, WorkloadProfile
from tests.controlplane.api_harness import profile_figures
from tests.controlplane.tenant_key_support import (
    OTHER,
    World,
    issue_key,
    key_client,
    two_tenant_world,
)

pytestmark = pytest.mark.django_db

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
CALLERS = ("policy-admin", "finance", "viewer", "tenant key", "no role", "anonymous")
# The order the callers are probed in: whoever writes for real (the policy admin) last, so the
# refused callers all meet the world as it was built.
PROBE_ORDER = ("anonymous", "no role", "viewer", "finance", "tenant key", "policy-admin")
OUTCOMES = {"all", "own", "yes", "403", "401"}


@dataclass(frozen=True)
class Row:
    records: str
    operation: str
    cells: dict[str, str]

    @property
    def key(self) -> tuple[str, str]:
        return (self.records, self.operation)

    def names(self, cell: str) -> list[str]:
        return re.findall(r"`([^`]+)`", cell)


def matrix_rows() -> list[Row]:
    """The rows of the table under the "Role matrix" paragraph of docs/api.md."""
    text = DOC.read_text(encoding="utf-8")
    start = text.index('<a id="role-matrix"></a>')
    lines = text[start:].splitlines()
    header_at = next(i for i, line in enumerate(lines) if line.startswith("| records |"))
    header = [c.strip().strip("`") for c in lines[header_at].strip("|").split("|")]
    assert header == ["records", "operation", *CALLERS], header
    rows = []
    for line in lines[header_at + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == len(header), line
        rows.append(Row(cells[0], cells[1], dict(zip(CALLERS, cells[2:], strict=True))))
    return rows


ROWS = matrix_rows()


# -- callers -----------------------------------------------------------------------------------


def _clients(world: World, role_users: dict[str, Any]) -> dict[str, APIClient]:
    clients: dict[str, APIClient] = {}
    for caller, user_key in (
        ("policy-admin", "policy-admin"),
        ("finance", "finance"),
        ("viewer", "viewer"),
        ("no role", "no-role"),
    ):
        client = APIClient()
        client.force_authenticate(user=role_users[user_key])
        clients[caller] = client
    clients["anonymous"] = APIClient()
    clients["tenant key"] = key_client(issue_key(world.own.tenant))
    return clients


# -- what one answer means -----------------------------------------------------------------------

ALLOWED_WRITE = {200, 201, 202, 204, 400, 409, 412, 428}


def _refusal(status: int) -> str | None:
    return {401: "401", 403: "403"}.get(status)


def _one(outcomes: set[str], detail: list[Any]) -> str:
    """The row's single outcome for a caller; several mean the API is inconsistent."""
    if len(outcomes) == 1:
        return next(iter(outcomes))
    return f"mixed {sorted(outcomes)}: {detail}"


def _write(status: int, *, expect: set[int] | None = None) -> str:
    refused = _refusal(status)
    if refused is not None:
        return refused
    return "yes" if status in (expect or ALLOWED_WRITE) else f"status {status}"


def _scoped_write(own_status: int, other_status: int | None, *, expect: set[int]) -> str:
    """A write on the caller's own tenant's record, then the same on the other tenant's."""
    outcome = _write(own_status, expect=expect)
    if outcome != "yes" or other_status is None:
        return outcome
    return "own" if other_status == 404 else outcome


# -- probes ------------------------------------------------------------------------------------

Probe = Callable[[APIClient, World, Row], str]
PROBES: dict[tuple[str, str], Probe] = {}


def probe(*keys: tuple[str, str]) -> Callable[[Probe], Probe]:
    def register(function: Probe) -> Probe:
        for key in keys:
            PROBES[key] = function
        return function

    return register


def _read(client: APIClient, name: str, other_pk: int | None, params: Any = None) -> str:
    """A list read: ``all`` when the other tenant's record shows, ``own`` when it does not
    (and its detail, when there is one, is a 404)."""
    response = client.get(reverse(name), params or {})
    refused = _refusal(response.status_code)
    if refused is not None:
        return refused
    if response.status_code != 200:
        return f"status {response.status_code}"
    if other_pk is None:
        return "all" if OTHER in response.content.decode() else "own"
    ids = {row["id"] for row in response.json()["results"]}
    if other_pk in ids:
        return "all"
    detail = client.get(reverse(name.replace("-list", "-detail"), kwargs={"pk": other_pk}))
    return "own" if detail.status_code == 404 else f"detail {detail.status_code}"


OWNED = {
    "tenants": ("tenant-list", "tenant"),
    "tenant-quotas": ("tenant-quota-list", "quota"),
    "workload-profiles": ("workload-profile-list", "profile"),
    "telemetry/observations": ("telemetry-observation-list", "observation"),
    "telemetry/profiles": ("telemetry-profile-list", "telemetry_profile"),
    "telemetry/series": ("telemetry-series-list", "series"),
    "telemetry/alerts": ("drift-alert-list", "alert"),
}


@probe(
    ("`tenants`", "read"),
    ("`tenant-quotas`", "read"),
    ("`workload-profiles`", "read"),
    ("`telemetry/observations`", "read"),
)
def read_owned(client: APIClient, world: World, row: Row) -> str:
    outcomes, detail = set(), []
    for path in row.names(row.records):
        name, attribute = OWNED[path]
        outcome = _read(client, name, getattr(world.other, attribute).pk)
        outcomes.add(outcome)
        detail.append((path, outcome))
    return _one(outcomes, detail)


def _tenant_change(world: World, field: str) -> dict[str, Any]:
    """A valid change of one field of the caller's tenant (what an operator might do)."""
    tenant = Tenant.objects.get(pk=world.own.tenant.pk)
    other_region = world.other.tenant.home_region
    if other_region.pk == tenant.home_region_id:
        other_region = type(other_region).objects.exclude(pk=tenant.home_region_id).first()
    changes: dict[str, dict[str, Any]] = {
        "display_name": {"display_name": tenant.display_name + " (renamed)"},
        "name": {"name": tenant.name + "-renamed"},
        "tier": {"tier": Tier.objects.exclude(pk=tenant.tier_id).order_by("-priority")[0].pk},
        "home_region": {"home_region": other_region.pk, "residency_regions": [other_region.pk]},
        "residency_geography": {
            "residency_geography": None
            if tenant.residency_geography_id
            else tenant.home_region.geography_id
        },
        "residency_regions": {"residency_regions": []},
        "spill_allowed": {"spill_allowed": not tenant.spill_allowed},
        "max_spill_rtt_ms": {"max_spill_rtt_ms": (tenant.max_spill_rtt_ms or 20.0) + 10.0},
        "fair_share_weight": {"fair_share_weight": min(1000.0, tenant.fair_share_weight * 2)},
    }
    return changes[field]


def _patch(client: APIClient, url: str, body: dict[str, Any]) -> int:
    return int(client.patch(url, body, format="json", HTTP_IF_MATCH="*").status_code)


@probe(("`tenants`", "change"))
def change_tenant(client: APIClient, world: World, row: Row) -> str:
    outcomes, detail = set(), []
    for field in row.names(row.operation):
        body = _tenant_change(world, field)
        own = _patch(client, reverse("tenant-detail", args=[world.own.tenant.pk]), body)
        other = _patch(client, reverse("tenant-detail", args=[world.other.tenant.pk]), body)
        outcome = _scoped_write(own, other, expect={200})
        outcomes.add(outcome)
        detail.append((field, own, other))
    return _one(outcomes, detail)


@probe(("`tenants`", "create, delete"))
def create_delete_tenant(client: APIClient, world: World, row: Row) -> str:
    own = world.own.tenant
    body = {"name": "newco", "tier": own.tier_id, "home_region": own.home_region_id}
    made = client.post(reverse("tenant-list"), body, format="json")
    target = made.json()["id"] if made.status_code == 201 else own.pk
    deleted = client.delete(reverse("tenant-detail", args=[target]), HTTP_IF_MATCH="*")
    outcomes = {_write(made.status_code, expect={201}), _write(deleted.status_code, expect={204})}
    return _one(outcomes, [made.status_code, deleted.status_code])


def _quota_change(world: World, field: str) -> dict[str, Any]:
    quota = TenantQuota.objects.get(pk=world.own.quota.pk)
    limit = quota.tokens_per_minute_limit
    burst = quota.tokens_per_minute_burst
    changes: dict[str, dict[str, Any]] = {
        "budget_rate_replica_s_per_s": {
            "budget_rate_replica_s_per_s": quota.budget_rate_replica_s_per_s + 1.0
        },
        "budget_burst_replica_s": {"budget_burst_replica_s": quota.budget_burst_replica_s + 10.0},
        "tokens_per_minute_limit": {"tokens_per_minute_limit": min(limit or 1000, burst or 10**6)},
        "tokens_per_minute_burst": {"tokens_per_minute_burst": max(burst or 0, limit or 0) + 1000},
    }
    if changes[field] == {field: getattr(quota, field)}:
        changes[field] = {field: getattr(quota, field) + 1}
    return changes[field]


@probe(("`tenant-quotas`", "change"))
def change_quota(client: APIClient, world: World, row: Row) -> str:
    outcomes, detail = set(), []
    for field in row.names(row.operation):
        body = _quota_change(world, field)
        own = _patch(client, reverse("tenant-quota-detail", args=[world.own.quota.pk]), body)
        other = _patch(client, reverse("tenant-quota-detail", args=[world.other.quota.pk]), body)
        outcome = _scoped_write(own, other, expect={200})
        outcomes.add(outcome)
        detail.append((field, own, other))
    return _one(outcomes, detail)


@probe(("`tenant-quotas`", "create, delete"))
def create_delete_quota(client: APIClient, world: World, row: Row) -> str:
    quota = world.own.quota
    deleted = client.delete(reverse("tenant-quota-detail", args=[quota.pk]), HTTP_IF_MATCH="*")
    body = {
        "tenant": world.own.tenant.pk,
        "budget_rate_replica_s_per_s": 2.0,
        "budget_burst_replica_s": 60.0,
    }
    made = client.post(reverse("tenant-quota-list"), body, format="json")
    outcomes = {_write(deleted.status_code, expect={204}), _write(made.status_code, expect={201})}
    return _one(outcomes, [deleted.status_code, made.status_code])


def _profile_body(world: World, *, source: str, version: int) -> dict[str, Any]:
    profile = world.own.profile
    return {
        "tenant": world.own.tenant.pk,
        "model": profile.model_id,
        "workload_class": profile.workload_class_id,
        "version": version,
        "source": source,
        **profile_figures(),
    }


def _profile_writes(
    client: APIClient, world: World, *, source: str, existing: WorkloadProfile, theirs: int
) -> str:
    version = 100 + WorkloadProfile.objects.count()
    made = client.post(
        reverse("workload-profile-list"),
        _profile_body(world, source=source, version=version),
        format="json",
    )
    target = made.json()["id"] if made.status_code == 201 else existing.pk
    url = reverse("workload-profile-detail", args=[target])
    changed = client.patch(url, {"peak_requests_per_s": 1.5}, format="json")
    other = client.patch(
        reverse("workload-profile-detail", args=[theirs]),
        {"peak_requests_per_s": 1.5},
        format="json",
    )
    deleted = client.delete(url)
    statuses = [made.status_code, changed.status_code, other.status_code, deleted.status_code]
    outcomes = {
        _scoped_write(made.status_code, None, expect={201}),
        _scoped_write(changed.status_code, other.status_code, expect={200}),
        _scoped_write(deleted.status_code, None, expect={204}),
    }
    # A key's own writes pass and the other tenant's record is not there: ``own``.
    if outcomes == {"yes", "own"}:
        outcomes = {"own"}
    return _one(outcomes, statuses)


@probe(("`workload-profiles`", "create, change, delete a declared profile"))
def declared_profiles(client: APIClient, world: World, row: Row) -> str:
    return _profile_writes(
        client,
        world,
        source="declared",
        existing=world.own.profile,
        theirs=world.other.profile.pk,
    )


@probe(("`workload-profiles`", "create, change, delete a measured profile"))
def measured_profiles(client: APIClient, world: World, row: Row) -> str:
    return _profile_writes(
        client,
        world,
        source="telemetry",
        existing=world.own.telemetry_profile,
        theirs=world.other.telemetry_profile.pk,
    )


FLEET = {
    "geographies": "geography",
    "regions": "region",
    "zones": "zone",
    "region-links": "region-link",
    "hosted-providers": "hosted-provider",
    "accelerators": "accelerator",
    "inventory": "inventory",
    "models": "model",
    "shapes": "shape",
    "capacity-figures": "capacity-figure",
    "workload-classes": "workload-class",
    "tiers": "tier",
}


@probe(("fleet records", "read"))
def read_fleet(client: APIClient, world: World, row: Row) -> str:
    outcomes, detail = set(), []
    for path in row.names(row.records):
        response = client.get(reverse(f"{FLEET[path]}-list"))
        refused = _refusal(response.status_code)
        outcome = refused or ("all" if response.status_code == 200 else "?")
        outcomes.add(outcome)
        detail.append((path, response.status_code))
    return _one(outcomes, detail)


def _first_pk(name: str) -> int:
    """The first record behind the list route ``name``."""
    view = resolve(reverse(name)).func
    model = view.cls.queryset.model  # type: ignore[attr-defined]
    return int(model.objects.order_by("pk").values_list("pk", flat=True)[0])


@probe(("fleet records", "create, change"))
def write_fleet(client: APIClient, world: World, row: Row) -> str:
    outcomes, detail = set(), []
    for basename in FLEET.values():
        made = client.post(reverse(f"{basename}-list"), {}, format="json")
        pk = _first_pk(f"{basename}-list")
        changed = client.patch(
            reverse(f"{basename}-detail", args=[pk]), {}, format="json", HTTP_IF_MATCH="*"
        )
        # An empty create is a 400 (past the permission check); an empty change is a 200.
        outcomes |= {_write(made.status_code, expect={400}), _write(changed.status_code)}
        detail.append((basename, made.status_code, changed.status_code))
    return _one(outcomes, detail)


@probe(("`telemetry/alerts`", "acknowledge"))
def acknowledge(client: APIClient, world: World, row: Row) -> str:
    own = client.post(reverse("drift-alert-acknowledge", args=[world.own.alert.pk]))
    other = client.post(reverse("drift-alert-acknowledge", args=[world.other.alert.pk]))
    return _scoped_write(own.status_code, other.status_code, expect={200})


@probe(("`plans`", "read"))
def read_plans(client: APIClient, world: World, row: Row) -> str:
    outcomes, detail = set(), []
    for name, kwargs in (
        ("plan-list", None),
        ("plan-detail", {"pk": world.plan.pk}),
        ("plan-active", None),
    ):
        response = client.get(reverse(name, kwargs=kwargs))
        refused = _refusal(response.status_code)
        if refused is None and response.status_code != 200:
            refused = f"status {response.status_code}"
        if refused is not None:
            outcomes.add(refused)
        elif name != "plan-list":
            tenants = {r["tenant"] for r in response.json()["routing"]}
            outcomes.add("all" if OTHER in tenants else "own")
        detail.append((name, response.status_code))
    return _one(outcomes, detail)


@probe(("`plans`", "`replan`, `approve`, `reject`"))
def decide_plans(client: APIClient, world: World, row: Row) -> str:
    outcomes, detail = set(), []
    reason = {"reason": "checked against the role matrix"}
    for name in ("plan-approve", "plan-reject"):
        # The active plan cannot be decided again: a 400 past the permission check.
        response = client.post(reverse(name, args=[world.plan.pk]), reason, format="json")
        outcomes.add(_write(response.status_code, expect={400}))
        detail.append((name, response.status_code))
    replanned = client.post(reverse("plan-replan"), {}, format="json")
    outcomes.add(_write(replanned.status_code, expect={202}))
    detail.append(("plan-replan", replanned.status_code))
    return _one(outcomes, detail)


@probe(("`plans/what-ifs`", "submit a what-if preview"))
def submit_whatif(client: APIClient, world: World, row: Row) -> str:
    """A what-if preview for the caller's own (or the first) tenant: queued, 202."""
    body = {"tenant": world.own.tenant.name, "traffic_factor": 2}
    response = client.post("/api/plans/what-ifs/", body, format="json")
    return _one({_write(response.status_code, expect={202})}, [("what-ifs", response.status_code)])


REPORTS = {
    "finance/forecast": ("finance-forecast", {"group_by": "tenant"}),
    "finance/forecast/opencost": ("finance-opencost", {"aggregate": "tenant"}),
    "finance/promises": ("finance-promises", {}),
    "finance/showback": ("finance-showback", {}),
    "finance/history": ("finance-history", {"period": "day", "horizon": 3, "group_by": "tenant"}),
}


@probe(("`finance/forecast`", "read"))
def read_reports(client: APIClient, world: World, row: Row) -> str:
    outcomes, detail = set(), []
    for path in row.names(row.records):
        name, params = REPORTS[path]
        outcome = _read(client, name, None, params)
        outcomes.add(outcome)
        detail.append((path, outcome))
    return _one(outcomes, detail)


OPERATIONS = {
    "finance/commitments": "finance-commitments",
    "plans/runs": "plan-run-list",
    "telemetry/pulls": "telemetry-pull-list",
    "telemetry/derivations": "telemetry-derivation-list",
    "telemetry/pool-alerts": "pool-drift-alert-list",
    "telemetry/pool-signal-alerts": "pool-signal-alert-list",
    "emission/sinks": "allocation-sink-list",
    "emission/outbox": "outbox-entry-list",
    "emission/shadow-diffs": "shadow-diff-list",
    "benchmarks/runs": "benchmark-run-list",
    "benchmarks/endpoints": "benchmark-endpoint-list",
    "benchmarks/freshness": "benchmark-freshness-list",
}


@probe(("`finance/commitments`", "read"))
def read_operations(client: APIClient, world: World, row: Row) -> str:
    outcomes, detail = set(), []
    for path in row.names(row.records):
        response = client.get(reverse(OPERATIONS[path]))
        outcome = _refusal(response.status_code) or (
            "all" if response.status_code == 200 else f"status {response.status_code}"
        )
        outcomes.add(outcome)
        detail.append((path, response.status_code))
    return _one(outcomes, detail)


@probe(("`emission/sinks`", "create"))
def create_operations(client: APIClient, world: World, row: Row) -> str:
    outcomes, detail = set(), []
    for path in row.names(row.records):
        # An empty body: a 400 once the caller may create at all.
        response = client.post(reverse(OPERATIONS[path]), {}, format="json")
        outcomes.add(_write(response.status_code, expect={400}))
        detail.append((path, response.status_code))
    return _one(outcomes, detail)


@probe(("`tenant-keys`", "read, create, revoke"))
def manage_keys(client: APIClient, world: World, row: Row) -> str:
    key_id = TenantKey.objects.order_by("pk").values_list("pk", flat=True)[0]
    listed = client.get(reverse("tenant-key-list"))
    made = client.post(
        reverse("tenant-key-list"), {"tenant": world.own.tenant.pk, "name": "m"}, format="json"
    )
    revoked = client.post(reverse("tenant-key-revoke", args=[key_id]))
    outcomes = {
        _write(listed.status_code, expect={200}),
        _write(made.status_code, expect={201}),
        _write(revoked.status_code, expect={200}),
    }
    return _one(outcomes, [listed.status_code, made.status_code, revoked.status_code])


def _probe_key(records: str, operation: str) -> tuple[str, str]:
    """A row's probe key: the first name of its records cell and the verb of its operation
    (``change `tier`, …`` → ``change``; a measured profile's parenthesis dropped)."""
    first = re.split(r"[:,(]", records)[0].strip()
    verb = operation.split(" (")[0]
    if not verb.startswith("`"):
        verb = verb.split(" `")[0]
    return (first, verb)


def _probe_for(row: Row) -> Probe:
    key = _probe_key(row.records, row.operation)
    if key not in PROBES:
        raise AssertionError(f"no probe for the row {row.key}: add one to this test")
    return PROBES[key]


def _iter_cells() -> Iterator[tuple[Row, str]]:
    for row in ROWS:
        for caller in CALLERS:
            yield row, caller


# -- the checks --------------------------------------------------------------------------------


def test_the_matrix_is_read_and_every_cell_is_an_outcome() -> None:
    assert len(ROWS) >= 15
    for row, caller in _iter_cells():
        assert row.cells[caller] in OUTCOMES, (row.key, caller, row.cells[caller])
    used = {_probe_for(row) for row in ROWS}
    assert used == set(PROBES.values()), "a probe no row of the matrix uses"


def test_every_writable_field_of_a_tenant_and_a_quota_has_a_row() -> None:
    for path, serializer in (
        ("`tenants`", TenantSerializer),
        ("`tenant-quotas`", TenantQuotaSerializer),
    ):
        named = {
            name
            for row in ROWS
            if row.records == path and row.operation.startswith("change")
            for name in row.names(row.operation)
        }
        writable = {
            name
            for name, field in serializer().fields.items()
            if not field.read_only and name != "tenant"
        }
        assert named == writable, (path, sorted(named ^ writable))


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.records[:40]} | {r.operation[:40]}" for r in ROWS])
def test_each_cell_of_the_row_is_what_the_api_answers(row: Row, role_users: dict[str, Any]) -> None:
    world = two_tenant_world()
    # Active since two days ago: whole days of finance history, split between both tenants.
    Plan.objects.filter(pk=world.plan.pk).update(activated_at=timezone.now() - timedelta(days=2))
    # Spill needs a largest round trip: with one set, turning spill on is a valid change.
    Tenant.objects.update(max_spill_rtt_ms=50.0)
    clients = _clients(world, role_users)
    check = _probe_for(row)
    answered = {}
    for caller in PROBE_ORDER:
        answered[caller] = check(clients[caller], world, row)
    expected = {caller: row.cells[caller] for caller in PROBE_ORDER}
    assert answered == expected
