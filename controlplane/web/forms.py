"""Forms of the operators' pages: they parse and check input; the services decide."""

from __future__ import annotations

from django import forms

from controlplane.core.validators import RTT_MS
from controlplane.fleet.admin_forms import FiniteFloatField
from controlplane.fleet.models import Region
from controlplane.plans.whatif import MAX_PROMPT_DELTA, MAX_TRAFFIC_FACTOR, WhatIfChange
from controlplane.policies.forms import TierChoiceField
from controlplane.policies.models import Tenant, Tier

SPILL_CHOICES = (
    ("", "keep its spill permission"),
    ("allow", "allowed: may be served outside its home region"),
    ("forbid", "not allowed: served in its home region only"),
)


class PlanDecisionForm(forms.Form):
    ACTIONS = (("approve", "Approve"), ("reject", "Reject"))

    action = forms.ChoiceField(choices=ACTIONS, widget=forms.HiddenInput)
    reason = forms.CharField(
        label="Reason",
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=2000,
        strip=True,
        help_text="Recorded in the plan's history with your name.",
        error_messages={"required": "Give a reason: it is recorded in the plan's history."},
    )


class WhatIfForm(forms.Form):
    tenant = forms.ModelChoiceField(
        queryset=Tenant.objects.order_by("name"), to_field_name="name", label="Tenant"
    )
    change_residency = forms.BooleanField(
        required=False, label="Change its residency regions to the ones ticked"
    )
    residency_regions = forms.ModelMultipleChoiceField(
        queryset=Region.objects.order_by("name"),
        to_field_name="name",
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="Residency regions",
        help_text="Its data may be served only in these regions; none ticked = no region list.",
    )
    tier = TierChoiceField(
        queryset=Tier.objects.order_by("priority", "name"),
        to_field_name="name",
        required=False,
        label="Tier (SLO and failure promise)",
        empty_label="keep its tier",
    )
    spill_allowed = forms.ChoiceField(
        choices=SPILL_CHOICES,
        required=False,
        label="Spill",
        help_text="Whether its traffic may be served outside its home region.",
    )
    max_spill_rtt_ms = FiniteFloatField(
        required=False,
        min_value=RTT_MS.low,
        max_value=RTT_MS.high,
        label="Largest round trip spill may add (ms)",
        help_text="Empty keeps its own; needed to allow spill when it has none.",
    )
    traffic_factor = FiniteFloatField(
        label="Traffic × k",
        initial=1.0,
        min_value=0.0,
        max_value=MAX_TRAFFIC_FACTOR,
        help_text="Its requests per second multiplied by this.",
    )
    prompt_tokens_delta = FiniteFloatField(
        label="Prompt tokens added per request",
        initial=0.0,
        min_value=-MAX_PROMPT_DELTA,
        max_value=MAX_PROMPT_DELTA,
        help_text="Negative to shorten; a prompt keeps at least 1 token.",
    )

    def clean(self) -> dict[str, object]:
        data = super().clean() or {}
        tenant: Tenant | None = data.get("tenant")
        if (
            tenant is not None
            and data.get("spill_allowed") == "allow"
            and data.get("max_spill_rtt_ms") is None
            and tenant.max_spill_rtt_ms is None
        ):
            self.add_error(
                "max_spill_rtt_ms",
                f"{tenant.name} has no largest spill round trip: give one to allow spill.",
            )
        return data

    def change(self) -> WhatIfChange:
        data = self.cleaned_data
        tenant: Tenant = data["tenant"]
        tier: Tier | None = data.get("tier")
        regions = None
        if data.get("change_residency"):
            regions = tuple(sorted(r.name for r in data["residency_regions"]))
        spill = {"allow": True, "forbid": False}.get(data.get("spill_allowed") or "")
        rtt = data.get("max_spill_rtt_ms")
        return WhatIfChange(
            tenant=tenant.name,
            residency_regions=regions,
            tier=tier.name if tier is not None and tier.pk != tenant.tier_id else None,
            traffic_factor=float(data["traffic_factor"]),
            prompt_tokens_delta=float(data["prompt_tokens_delta"]),
            spill_allowed=None if spill is None or spill == tenant.spill_allowed else spill,
            max_spill_rtt_ms=None if rtt is None or rtt == tenant.max_spill_rtt_ms else float(rtt),
        )
