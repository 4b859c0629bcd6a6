"""Ids in API bodies are whole numbers: ``"tier": "1"`` (a string) is a 400 naming the field.

Every writable reference of every record endpoint is tried, found from the serializers
themselves, so a new reference field is covered without a line here. A form (the browsable
API's HTML forms) can only send text: there the digits still name the record.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse
from rest_framework.relations import ManyRelatedField, RelatedField

from controlplane.access.api import TenantKeySerializer
from controlplane.api import urls as api_urls
from controlplane.core.roles import POLICY_ADMIN
from controlplane.core.serializers import StrictPrimaryKeyRelatedField
from controlplane.policies.models import Tenant
from tests.controlplane.api_harness import Records

pytestmark = pytest.mark.django_db


def _reference_fields() -> list[tuple[str, str, bool]]:
    """(route basename, field, many) of every writable id reference of the record endpoints."""
    found = []
    for prefix, viewset, basename in api_urls.router.registry:
        del prefix
        serializer = viewset.serializer_class()
        for name, field in serializer.fields.items():
            many = isinstance(field, ManyRelatedField)
            relation = field.child_relation if many else field
            if field.read_only or not isinstance(relation, RelatedField):
                continue
            found.append((basename, name, many))
    return found


REFERENCES = _reference_fields()


def test_the_references_are_found_and_all_strict() -> None:
    names = {(basename, name) for basename, name, _ in REFERENCES}
    assert {("tenant", "tier"), ("tenant", "residency_regions"), ("zone", "region")} <= names
    for basename, name, many in REFERENCES:
        viewset = dict((b, v) for _, v, b in api_urls.router.registry)[basename]
        field = viewset.serializer_class().fields[name]
        relation = field.child_relation if many else field
        assert isinstance(relation, StrictPrimaryKeyRelatedField), (basename, name)
    tenant_field = TenantKeySerializer().fields["tenant"]
    assert isinstance(tenant_field, StrictPrimaryKeyRelatedField)


@pytest.mark.parametrize(("basename", "field", "many"), REFERENCES)
def test_a_string_id_is_a_400_naming_the_field(
    basename: str, field: str, many: bool, api_client_for: Any
) -> None:
    client = api_client_for(POLICY_ADMIN)
    records = Records()
    region = records.region()
    value: Any = [str(region.pk)] if many else str(region.pk)
    response = client.post(reverse(f"{basename}-list"), {field: value}, format="json")
    assert response.status_code == 400, response.content
    messages = response.json()["error"]["fields"][field]
    assert "Incorrect type" in str(messages), messages


def test_the_reported_string_tier_is_refused_and_a_number_accepted(api_client_for: Any) -> None:
    client = api_client_for(POLICY_ADMIN)
    records = Records()
    tenant = records.tenant()
    other = records.tier(name="gold")
    url = reverse("tenant-detail", args=[tenant.pk])
    refused = client.patch(url, {"tier": str(other.pk)}, format="json", HTTP_IF_MATCH="*")
    assert refused.status_code == 400
    assert "tier" in refused.json()["error"]["fields"]
    assert Tenant.objects.get(pk=tenant.pk).tier_id == tenant.tier_id
    for bad in (True, 1.5, "1e0", " 1", [other.pk], {"id": other.pk}):
        response = client.patch(url, {"tier": bad}, format="json", HTTP_IF_MATCH="*")
        assert response.status_code == 400, bad
    accepted = client.patch(url, {"tier": other.pk}, format="json", HTTP_IF_MATCH="*")
    assert accepted.status_code == 200 and accepted.json()["tier"] == other.pk


def test_a_form_names_ids_by_their_digits(api_client_for: Any) -> None:
    client = api_client_for(POLICY_ADMIN)
    records = Records()
    region = records.region()
    tier = records.tier()
    body = {"name": "formco", "tier": str(tier.pk), "home_region": str(region.pk)}
    made = client.post(reverse("tenant-list"), body)  # multipart, as a browser form sends
    assert made.status_code == 201, made.content
    assert Tenant.objects.get(name="formco").tier_id == tier.pk
    bad = client.post(reverse("tenant-list"), {**body, "name": "formco2", "tier": "1.5"})
    assert bad.status_code == 400 and "tier" in bad.json()["error"]["fields"]
    assert not Tenant.objects.filter(name="formco2").exists()


def test_the_tenant_key_endpoint_refuses_a_string_tenant(api_client_for: Any) -> None:
    tenant = Records().tenant()
    response = api_client_for(POLICY_ADMIN).post(
        reverse("tenant-key-list"), {"tenant": str(tenant.pk), "name": "ci"}, format="json"
    )
    assert response.status_code == 400 and "tenant" in response.json()["error"]["fields"]
