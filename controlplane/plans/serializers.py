"""The API's representation of plans and re-plan runs (read-only: plans are written by
re-planning, and decided by the approve and reject actions)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from controlplane.core.serializers import StrictCharField, StrictFieldsMixin, read_only_by
from controlplane.plans.demand import plan_demand_sources
from controlplane.plans.models import Plan, PlanAllocation, PlanRouting, ReplanRun
from controlplane.plans.selectors import plan_problem_or_error, plan_solution


class PlanAllocationSerializer(serializers.ModelSerializer[PlanAllocation]):
    class Meta:
        model = PlanAllocation
        fields = (
            "region",
            "zone",
            "shape",
            "accelerator",
            "gpus_per_replica",
            "replicas",
            "cost_per_hour",
        )


class PlanRoutingSerializer(serializers.ModelSerializer[PlanRouting]):
    class Meta:
        model = PlanRouting
        fields = ("demand", "tenant", "region", "shape", "requests_per_s")


class _VerdictFields(serializers.Serializer[dict[str, Any]]):
    """What a replay verdict says of a tenant or a demand: p95 TTFT per scenario against the
    objective."""

    tenant = serializers.CharField()
    requests = serializers.IntegerField(help_text="Requests replayed.")
    ttft_slo_s = serializers.FloatField(allow_null=True, help_text="The tier's p95 TTFT, s.")
    p95_ttft_s = serializers.DictField(
        child=serializers.FloatField(allow_null=True),
        help_text='p95 TTFT (s) per scenario: "all up", "one replica lost", "zone Z lost"; '
        "null: requests that no replica serves.",
    )
    worst_scenario = serializers.CharField()
    worst_p95_ttft_s = serializers.FloatField(allow_null=True)
    holds = serializers.BooleanField(allow_null=True, help_text="null: no objective.")


class ReplayVerdictSerializer(_VerdictFields):
    """One demand's replay: its p95 TTFT per failure scenario against its objective."""

    demand = serializers.CharField()
    # A declared field named like Field.source: DRF's metaclass pops it from the class.
    source = serializers.CharField(  # type: ignore[assignment]
        help_text='"request log" or "synthesised" arrivals.'
    )


class TenantVerdictSerializer(_VerdictFields):
    """One tenant's replay: p95 TTFT over all its requests per scenario, against its tier's
    objective. What the plan holds or misses."""

    demands = serializers.ListField(child=serializers.CharField())


class ExcludedShapeSerializer(serializers.Serializer[dict[str, Any]]):
    demand = serializers.CharField()
    shape = serializers.CharField()
    reason = serializers.CharField()


class RaisedLoadSerializer(serializers.Serializer[dict[str, Any]]):
    burst_before = serializers.FloatField()
    burst = serializers.FloatField()


class VerificationSerializer(serializers.Serializer[dict[str, Any]]):
    """The plan's replay verification (``planner.placement.replay``)."""

    replayed = serializers.BooleanField()
    holds = serializers.BooleanField(
        allow_null=True, help_text="Every demand with an objective holds it; null: not replayed."
    )
    quantile = serializers.FloatField(required=False)
    tenants = TenantVerdictSerializer(many=True)
    demands = ReplayVerdictSerializer(many=True)
    excluded_shapes = ExcludedShapeSerializer(many=True)
    raised = serializers.DictField(
        child=RaisedLoadSerializer(),
        help_text="Demands whose load (burst) the replay raised so that it holds.",
    )
    rounds = serializers.IntegerField(help_text="Solves it took.")


def _unserved_rows(plan: Plan) -> list[dict[str, Any]]:
    """The plan's unserved rows as the solution document has them."""
    return [
        {
            "demand": row.demand,
            "tenant": row.tenant,
            "priority": row.priority,
            "requests_per_s": row.requests_per_s,
        }
        for row in plan_solution(plan).unserved
    ]


def verification_document(plan: Plan, tenant: str | None = None) -> dict[str, Any]:
    """The plan's verification as the API shows it, cut to ``tenant``'s demands if given."""
    solution = plan_solution(plan)
    stored = solution.verification or {}
    demands = list(stored.get("demands", []))
    tenants = list(stored.get("tenants", []))
    excluded = list(solution.excluded_shapes or ())
    raised = dict(stored.get("raised", {}))
    if tenant is not None:
        problem, _ = plan_problem_or_error(plan)
        mine = {d.id for d in problem.demands if d.tenant == tenant} if problem else set()
        demands = [v for v in demands if v.get("tenant") == tenant]
        tenants = [v for v in tenants if v.get("tenant") == tenant]
        excluded = [row for row in excluded if row.demand in mine]
        raised = {k: v for k, v in raised.items() if k in mine}
    out: dict[str, Any] = {
        "replayed": bool(stored.get("replayed")),
        "holds": stored.get("holds") if stored.get("replayed") else None,
        "tenants": tenants,
        "demands": demands,
        "excluded_shapes": [
            {"demand": row.demand, "shape": row.shape, "reason": row.reason} for row in excluded
        ],
        "raised": raised,
        "rounds": len(stored.get("rounds", [])),
    }
    if "quantile" in stored:
        out["quantile"] = stored["quantile"]
    if tenant is not None and stored.get("replayed"):
        out["holds"] = all(v.get("holds") is not False for v in tenants)
    return out


_PLAN_SUMMARY_FIELDS: tuple[str, ...] = (
    "id",
    "version",
    "state",
    "solver_status",
    "trigger",
    "inputs_hash",
    "cost_per_hour",
    "gap",
    "solve_seconds",
    "planned_requests_per_s",
    "unserved_requests_per_s",
    "stale_figure_count",
    "created_at",
    "created_by",
    "activated_at",
    "approved_by",
    "rejected_at",
    "rejected_by",
)


class PlanSerializer(serializers.ModelSerializer[Plan]):
    """A plan in a list: its state, figures and who made and decided it."""

    created_by = read_only_by("username")
    approved_by = read_only_by("username")
    rejected_by = read_only_by("username")
    stale_figure_count = serializers.SerializerMethodField()

    class Meta:
        model = Plan
        fields: tuple[str, ...] = _PLAN_SUMMARY_FIELDS
        read_only_fields: tuple[str, ...] = _PLAN_SUMMARY_FIELDS

    def get_stale_figure_count(self, plan: Plan) -> int:
        return len(plan.stale_figures or [])


# A plan as a tenant key sees it, and the documents only a fleet-wide caller gets.
_PLAN_TENANT_FIELDS = (
    *_PLAN_SUMMARY_FIELDS,
    "allocations",
    "routing",
    "unserved",
    "verification",
)
_PLAN_FLEET_DOCUMENTS = (
    "binding",
    "stale_figures",
    "forecast_band",
    "profile_sources",
    "diff",
    "explanation",
)


class ProfileSourcesSerializer(serializers.Serializer[dict[str, Any]]):
    declared = serializers.ListField(
        child=serializers.CharField(),
        help_text="Demand ids sized from their declared workload profiles (no telemetry rate "
        "history, or too little for the forecast).",
    )
    telemetry = serializers.ListField(
        child=serializers.CharField(),
        help_text="Demand ids sized from the telemetry forecast.",
    )


class PlanDetailSerializer(PlanSerializer):
    """One plan in full: allocations, routing, binding constraints, stale figures, forecast
    band, diff against the plan active when it was made, and the explanation. A tenant key
    gets the plan cut down to its tenant (``PlanTenantDetailSerializer``), without the
    documents that speak of every tenant."""

    # What a tenant key's view of a plan leaves out (the schema documents one shape for both).
    schema_optional_fields = _PLAN_FLEET_DOCUMENTS

    # The same values as the list's ``state`` enum; declared as text here because OpenAPI
    # enum names are per property name, and a second component with this choice set would
    # collide with the zones' ``state``.
    state = serializers.CharField(
        read_only=True,
        help_text="proposed, awaiting-approval, active, superseded or rejected.",
    )
    allocations = PlanAllocationSerializer(many=True, read_only=True)
    routing = PlanRoutingSerializer(many=True, read_only=True)
    unserved = serializers.SerializerMethodField()
    verification = serializers.SerializerMethodField()
    profile_sources = serializers.SerializerMethodField()

    class Meta(PlanSerializer.Meta):
        fields = (*_PLAN_TENANT_FIELDS, *_PLAN_FLEET_DOCUMENTS)
        read_only_fields = fields

    @extend_schema_field(ProfileSourcesSerializer)
    def get_profile_sources(self, plan: Plan) -> dict[str, list[str]]:
        """Which demands were sized from declared profiles and which from telemetry."""
        band = plan.forecast_band or {}
        # The problem (deferred in the detail) is read only for a plan stored before its band
        # listed the demands by source.
        return plan_demand_sources(band, None if "demand_sources" in band else plan.problem)

    @extend_schema_field(VerificationSerializer)
    def get_verification(self, plan: Plan) -> dict[str, Any]:
        """Each demand's replayed p95 TTFT against its objective, the shapes excluded for it
        and the loads raised."""
        return verification_document(plan)

    def get_unserved(self, plan: Plan) -> list[dict[str, Any]]:
        """Demands left (partly) unserved, requests/s in planned units."""
        return _unserved_rows(plan)


class PlanTenantDetailSerializer(PlanSerializer):
    """One plan as a tenant key sees it (``context["tenant"]`` names the tenant): its routing
    rows, the allocations that serve them (the zones' replicas of each region's shape its load
    is routed to), and its unserved load. The binding constraints, forecast band, diff and
    explanation speak of every tenant and are left out."""

    allocations = serializers.SerializerMethodField()
    routing = serializers.SerializerMethodField()
    unserved = serializers.SerializerMethodField()
    verification = serializers.SerializerMethodField()

    class Meta(PlanSerializer.Meta):
        fields = _PLAN_TENANT_FIELDS
        read_only_fields = fields

    @extend_schema_field(VerificationSerializer)
    def get_verification(self, plan: Plan) -> dict[str, Any]:
        return verification_document(plan, tenant=str(self.context["tenant"]))

    def _routing(self, plan: Plan) -> list[PlanRouting]:
        tenant = self.context["tenant"]
        return [row for row in plan.routing.all() if row.tenant == tenant]

    @extend_schema_field(PlanRoutingSerializer(many=True))
    def get_routing(self, plan: Plan) -> list[dict[str, Any]]:
        return list(PlanRoutingSerializer(self._routing(plan), many=True).data)

    @extend_schema_field(PlanAllocationSerializer(many=True))
    def get_allocations(self, plan: Plan) -> list[dict[str, Any]]:
        pools = {(row.region, row.shape) for row in self._routing(plan)}
        rows = [row for row in plan.allocations.all() if (row.region, row.shape) in pools]
        return list(PlanAllocationSerializer(rows, many=True).data)

    def get_unserved(self, plan: Plan) -> list[dict[str, Any]]:
        tenant = self.context["tenant"]
        return [row for row in _unserved_rows(plan) if row["tenant"] == tenant]


class ReplanRunSerializer(serializers.ModelSerializer[ReplanRun]):
    """A re-plan run: its status, timing and error, the plan it made, and its ``reason`` (why
    beyond the trigger, e.g. the drift alerts behind a drift re-plan; empty when none)."""

    requested_by = read_only_by("username")
    plan_version = serializers.SerializerMethodField()

    class Meta:
        model = ReplanRun
        fields = (
            "id",
            "status",
            "trigger",
            "requested_by",
            "plan",
            "plan_version",
            "created_at",
            "started_at",
            "finished_at",
            "attempts",
            "error",
            "reason",
        )
        read_only_fields = fields

    def get_plan_version(self, run: ReplanRun) -> int | None:
        return run.plan.version if run.plan is not None else None


class ReplanRequestSerializer(StrictFieldsMixin, serializers.Serializer[Any]):
    """The body of ``POST /api/plans/replan/``: nothing is needed; unknown fields are refused
    so a misspelt option is not silently ignored."""

    unknown_message = "Unknown field: a re-plan takes no options."

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise serializers.ValidationError(
                {"non_field_errors": ["Send a JSON object (or no body)."]}
            )
        return dict(super().to_internal_value(data))


DECISION_REASON_REQUIRED = "Give a reason: it is recorded in the plan's history."


class PlanDecisionSerializer(ReplanRequestSerializer):
    """The body of approve and reject: ``{"reason": "..."}``. The reason is required, as on the
    plan's page, and recorded in the plan's history with the deciding user; unknown fields
    are refused."""

    unknown_message = "Unknown field: approving or rejecting a plan takes only a reason."

    reason = StrictCharField(
        max_length=2000,
        help_text="Why the plan is approved or rejected; recorded in the plan's history with "
        "your name.",
        error_messages={"required": DECISION_REASON_REQUIRED, "blank": DECISION_REASON_REQUIRED},
    )

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        # No body at all is a missing reason, not an empty decision.
        return super().to_internal_value({} if data is None else data)
