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
from django.db.models import F
from django.utils.functional import cached_property

from controlplane.policies.models import Revisioned, Tenant, Tier, validate_residency_regions


class TierChoiceField(forms.ModelChoiceField):  # type: ignore[type-arg]
    """A tier picked by what it promises: name, SLO, failure promise and priority."""

    def label_from_instance(self, obj: Any) -> str:
        return tier_label(obj)


def tier_label(tier: Tier) -> str:
    return (
        f"{tier.name} — p95 TTFT ≤ {tier.p95_ttft_slo_s:g} s, "
        f"{tier.get_failure_promise_display()}, priority {tier.priority}"
    )


class RevisionCheckedForm(forms.ModelForm):  # type: ignore[type-arg]
    """A form for a ``Revisioned`` record that refuses to overwrite someone else's change.

    The revision the editor saw travels in a hidden field. On save the row is locked (inside
    the admin's transaction) and its revision compared; the save then writes the next
    revision after the stored one, also when the form was opened from an old history entry.
    """

    expected_revision = forms.IntegerField(widget=forms.HiddenInput, required=False)

    instance: Revisioned

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.fields["expected_revision"].required = True
            if not self.is_bound:
                # The stored revision, not the instance's: a history entry being reverted
                # carries the revision it had then.
                stored = self._stored_revision(lock=False)
                self.fields["expected_revision"].initial = (
                    stored if stored is not None else self.instance.revision
                )

    @cached_property
    def changed_data(self) -> list[str]:
        # The revision the editor saw is not a change: without this, every save of an
        # unchanged record counts as changed (new revision, empty history row).
        return [name for name in super().changed_data if name != "expected_revision"]

    def _stored_revision(self, *, lock: bool) -> int | None:
        rows = type(self.instance)._default_manager.filter(pk=self.instance.pk)
        if lock:
            # A no-op UPDATE takes the row's write lock on PostgreSQL and the database's write
            # lock on SQLite (which ignores SELECT ... FOR UPDATE), the same lock the API takes
            # before its If-Match check. It sends no signals, so writes no history row.
            rows.update(revision=F("revision"))
        revision: int | None = rows.values_list("revision", flat=True).first()
        return revision

    def clean(self) -> dict[str, Any]:
        cleaned: dict[str, Any] = super().clean() or {}
        expected = cleaned.get("expected_revision")
        if self.instance.pk is None or expected is None:
            return cleaned
        # Locked until the admin's transaction commits, so no write can slip in between this
        # check and the save.
        stored = self._stored_revision(lock=True)
        if stored is None:
            # Deleted since: saving restores it (a revert of a deleted record).
            return cleaned
        if stored != expected:
            raise ValidationError(
                f"This {self.instance._meta.verbose_name} was changed by someone else since "
                f"you opened it (revision {expected}, now {stored}). Reload the page, look at "
                "their change, and apply yours again.",
                code="stale_revision",
            )
        self.instance.revision = stored
        return cleaned


class TenantAdminForm(RevisionCheckedForm):
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
