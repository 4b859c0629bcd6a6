"""Admin forms for policy records.

Two checks the models cannot make on their own:

- optimistic concurrency: a revisioned record (tier, tenant, quota) edited in the admin is
  refused when it changed since the form was opened, as the API refuses a stale ``If-Match``;
- the residency region list, a many-to-many value that ``Tenant.clean()`` cannot see, checked
  by ``validate_residency_regions`` exactly as the API and scenario loading check it.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from controlplane.core.admin import RevisionCheckedForm
from controlplane.policies.models import Tenant, Tier, validate_residency_regions


class TierChoiceField(forms.ModelChoiceField[Tier]):
    """A tier picked by what it promises: name, SLO, failure promise and priority."""

    def label_from_instance(self, obj: Tier) -> str:
        return tier_label(obj)


def tier_label(tier: Tier) -> str:
    return (
        f"{tier.name} — p95 TTFT ≤ {tier.p95_ttft_slo_s:g} s, "
        f"{tier.get_failure_promise_display()}, priority {tier.priority}"
    )


class TenantAdminForm(RevisionCheckedForm[Tenant]):
    """Tenant form that also checks the residency region list against home region and
    geography, naming the regions at fault."""

    instance: Tenant

    tier = TierChoiceField(queryset=Tier.objects.order_by("priority", "name"), label="Tier")

    class Meta:
        model = Tenant
        fields = [
            "name",
            "display_name",
            "tier",
            "fair_share_weight",
            "home_region",
            "residency_geography",
            "residency_regions",
            "spill_allowed",
            "max_spill_rtt_ms",
        ]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        regions = cleaned.get("residency_regions")
        # Absent when the field itself was invalid; that error is already shown.
        if regions is not None:
            try:
                validate_residency_regions(
                    home_region=cleaned.get("home_region"),
                    geography=cleaned.get("residency_geography"),
                    regions=regions,
                )
            except ValidationError as error:
                self.add_error(None, error)
        return cleaned
