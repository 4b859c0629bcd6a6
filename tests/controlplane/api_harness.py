"""A declarative harness for the REST API's record endpoints.

Each endpoint gets its whole contract from a few lines: subclass ``EndpointContract`` (or
``ConditionalEndpointContract`` for records updated under If-Match) as ``Test<Endpoint>``, name
the URL ``basename`` and ``model``, and say how to ``make`` a record and what valid create and
update bodies look like. The base classes then test, for that endpoint:

- the role × action permission matrix (policy-admin, finance, viewer, no role, anonymous ×
  list, retrieve, history, create, update, delete), including that a refused write changes
  nothing;
- create/retrieve round trip, PUT and PATCH, delete;
- the model's validation rules through the API (400 naming the field, nothing written);
- the audit history of an API change (acting user, before and after);
- a battery of malformed bodies, hostile field values and query strings that must never
  produce a 5xx;
- a list query count that does not grow with the number of records;
- for conditional endpoints: ETag on GET, 428 without If-Match, 412 on a stale one with the
  record unchanged, and the new ETag after a successful conditional write.

``Records`` builds valid fleet and policy records with unique names for the tests.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any, ClassVar

import pytest
from django.db import connection
from django.db.models import Model
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from rest_framework.response import Response
from rest_framework.test import APIClient

from controlplane.api.urls import router
from controlplane.core.roles import FINANCE, POLICY_ADMIN, VIEWER
from controlplane.fleet.models import (
    AcceleratorType,
    CapacityFigure,
    Geography,
    HostedProvider,
    LlmModel,
    Region,
    RegionLink,
    ReplicaShape,
    WorkloadClass,
    Zone,
    ZoneInventory,
)
from controlplane.policies.models import Tenant, TenantQuota, Tier, WorkloadProfile

NO_ROLE = "no-role"
ANONYMOUS = "anonymous"
ROLE_NAMES = (POLICY_ADMIN, FINANCE, VIEWER, NO_ROLE, ANONYMOUS)
ACTIONS = ("list", "retrieve", "history", "create", "update", "delete")

_READ_ONLY = {
    "list": 200,
    "retrieve": 200,
    "history": 200,
    "create": 403,
    "update": 403,
    "delete": 403,
}
# The status each role gets for each action on every record endpoint.
EXPECTED_STATUS: dict[str, dict[str, int]] = {
    POLICY_ADMIN: {
        "list": 200,
        "retrieve": 200,
        "history": 200,
        "create": 201,
        "update": 200,
        "delete": 204,
    },
    FINANCE: _READ_ONLY,
    VIEWER: _READ_ONLY,
    NO_ROLE: dict.fromkeys(ACTIONS, 403),
    ANONYMOUS: dict.fromkeys(ACTIONS, 401),
}

# Field values thrown at every writable field of every endpoint: wrong types, values beyond
# every numeric range, NUL, very long text, unknown ids, dates out of range.
HOSTILE_VALUES: tuple[Any, ...] = (
    None,
    "",
    "NaN",
    "1e999",
    True,
    [1, 2],
    {"nested": {"deeper": [1, {"x": None}]}},
)
# The values above are refused by type whatever the method; these can pass type parsing and
# reach the model's rules and the database, so they are sent to both create and update.
EXTREME_VALUES: tuple[Any, ...] = (
    "x" * 5000,
    "nul\x00inside",
    10**30,
    2**63,
    1.0e308,
    -1.0e308,
    -1,
    0.5,
    99_999_999,
    "0001-01-01T00:00:00+05:00",
    "9999-12-31T23:59:59-05:00",
)

# Whole bodies that are not a valid record, as (content type, raw bytes).
_DEEP = 50_000
MALFORMED_BODIES: tuple[tuple[str, bytes], ...] = (
    ("application/json", b""),
    ("application/json", b"not json"),
    ("application/json", b'{"name": '),
    ("application/json", b"[1, 2, 3]"),
    ("application/json", b'"a string"'),
    ("application/json", b"null"),
    ("application/json", b"12"),
    ("application/json", b'{"name": NaN}'),
    ("application/json", b'{"name": Infinity}'),
    ("application/json", b'{"name": -Infinity}'),
    ("application/json", b"[" * _DEEP + b"]" * _DEEP),
    ("application/json", b'{"a": ' * _DEEP + b"1" + b"}" * _DEEP),
    ("application/json", b'{"name": "\xff\xfe\xfd"}'),
    ("application/json", b"\xef\xbb\xbf{}"),
    ("application/json; charset=no-such-charset", b'{"name": "x"}'),
    ("application/json; charset=utf-16", b'{"name": "x"}'),
    ("text/plain", b"name=x"),
    ("application/xml", b"<name>x</name>"),
    ("application/x-www-form-urlencoded", b"name=x&name=y&%ff=%00"),
    ("multipart/form-data; boundary=zzz", b"--zzz\r\ngarbage\r\n--zzz--"),
    ("multipart/form-data", b"no boundary at all"),
)

HOSTILE_QUERY_VALUES: tuple[str, ...] = (
    "x",
    "-1",
    "0",
    "99999999999999999999999999",
    "1e400",
    "NaN",
    "",
    "true",
    "\x00",
    "1,2",
    "-id,,name,__class__",
)


class Records:
    """Builds valid records with unique names; each argument left out is built too."""

    def __init__(self) -> None:
        self._serial = itertools.count(1)

    def name(self, prefix: str) -> str:
        return f"{prefix}-{next(self._serial)}"

    def geography(self, **fields: Any) -> Geography:
        return Geography.objects.create(**{"name": self.name("geo"), **fields})

    def region(self, geography: Geography | None = None, **fields: Any) -> Region:
        return Region.objects.create(
            **{"name": self.name("region"), "geography": geography or self.geography(), **fields}
        )

    def zone(self, region: Region | None = None, **fields: Any) -> Zone:
        return Zone.objects.create(
            **{"name": self.name("zone"), "region": region or self.region(), **fields}
        )

    def region_link(self, **fields: Any) -> RegionLink:
        fields["region_a"] = fields.get("region_a") or self.region()
        fields["region_b"] = fields.get("region_b") or self.region()
        return RegionLink.objects.create(**{"rtt_ms": 80.0, **fields})

    def hosted_provider(self, **fields: Any) -> HostedProvider:
        served = fields.pop("served_models", None)
        provider = HostedProvider.objects.create(
            **{
                "name": self.name("hosted"),
                "region": fields.pop("region", None) or self.region(),
                "input_price_per_mtok": 0.5,
                "output_price_per_mtok": 1.5,
                "tpm_limit": 1_000_000,
                "p95_ttft_s": 0.4,
                **fields,
            }
        )
        provider.served_models.set(served if served is not None else LlmModel.objects.all())
        return provider

    def accelerator(self, **fields: Any) -> AcceleratorType:
        return AcceleratorType.objects.create(
            **{
                "name": self.name("gpu"),
                "memory_gb": 80.0,
                "peak_bf16_tflops": 989.0,
                "memory_tbps": 3.35,
                "on_demand_price_per_gpu_hour": 4.0,
                "reserved_price_per_gpu_hour": 2.5,
                **fields,
            }
        )

    def inventory(self, **fields: Any) -> ZoneInventory:
        fields["zone"] = fields.get("zone") or self.zone()
        fields["accelerator"] = fields.get("accelerator") or self.accelerator()
        return ZoneInventory.objects.create(**{"gpus_available": 16, **fields})

    def llm_model(self, **fields: Any) -> LlmModel:
        return LlmModel.objects.create(
            **{
                "name": self.name("llm"),
                "parameters_billions": 8.0,
                "layers": 32,
                "kv_heads": 8,
                "head_dim": 128,
                **fields,
            }
        )

    def shape(self, **fields: Any) -> ReplicaShape:
        fields["model"] = fields.get("model") or self.llm_model()
        fields["accelerator"] = fields.get("accelerator") or self.accelerator()
        return ReplicaShape.objects.create(
            **{"name": self.name("shape"), "gpus_per_replica": 1, **fields}
        )

    def workload_class(self, **fields: Any) -> WorkloadClass:
        return WorkloadClass.objects.create(**{"name": self.name("class"), **fields})

    def figure(self, **fields: Any) -> CapacityFigure:
        fields["shape"] = fields.get("shape") or self.shape()
        return CapacityFigure.objects.create(
            **{
                "prefill_tokens_per_s": 20_000.0,
                "decode_tokens_per_s": 2_500.0,
                "max_concurrency": 64,
                **fields,
            }
        )

    def tier(self, **fields: Any) -> Tier:
        return Tier.objects.create(**{"name": self.name("tier"), "p95_ttft_slo_s": 1.0, **fields})

    def tenant(self, residency_regions: tuple[Region, ...] = (), **fields: Any) -> Tenant:
        fields["tier"] = fields.get("tier") or self.tier()
        fields["home_region"] = fields.get("home_region") or self.region()
        tenant = Tenant.objects.create(**{"name": self.name("tenant"), **fields})
        if residency_regions:
            tenant.residency_regions.set(residency_regions)
        return tenant

    def quota(self, **fields: Any) -> TenantQuota:
        fields["tenant"] = fields.get("tenant") or self.tenant()
        return TenantQuota.objects.create(
            **{"budget_rate_replica_s_per_s": 2.0, "budget_burst_replica_s": 60.0, **fields}
        )

    def profile(self, **fields: Any) -> WorkloadProfile:
        fields["tenant"] = fields.get("tenant") or self.tenant()
        fields["model"] = fields.get("model") or self.llm_model()
        fields["workload_class"] = fields.get("workload_class") or self.workload_class()
        return WorkloadProfile.objects.create(**{**profile_figures(), **fields})


def profile_figures() -> dict[str, float]:
    """A plausible chat workload: token percentiles in order, a modest peak rate."""
    return {
        "peak_requests_per_s": 12.0,
        "prompt_tokens_p50": 900.0,
        "prompt_tokens_mean": 1100.0,
        "prompt_tokens_p95": 2600.0,
        "prompt_tokens_p99": 4000.0,
        "output_tokens_p50": 180.0,
        "output_tokens_mean": 220.0,
        "output_tokens_p95": 520.0,
        "output_tokens_p99": 800.0,
    }


def an_hour_ago() -> str:
    return (timezone.now() - timedelta(hours=1)).isoformat()


def error_fields(response: Response) -> dict[str, Any]:
    """The ``fields`` of a 400 in the API's error contract."""
    body = response.json()
    assert body["error"]["code"] == "invalid", body
    fields: dict[str, Any] = body["error"]["fields"]
    return fields


def state_of(record: Model) -> dict[str, Any]:
    """Everything stored about a record (reloaded), for "nothing changed" assertions."""
    fresh = type(record)._default_manager.get(pk=record.pk)
    state = model_to_dict(fresh)
    state["revision"] = getattr(fresh, "revision", None)
    return state


def _normalise(value: Any) -> Any:
    """A value as the API's JSON would carry it (ids for records, ISO text for times)."""
    if isinstance(value, Model):
        return value.pk
    if isinstance(value, list | tuple):
        return sorted(_normalise(v) for v in value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str) and (moment := parse_datetime(value)) is not None:
        return moment.isoformat()
    return value


@pytest.mark.django_db
class APITest:
    """Base of API test classes: a ``Records`` builder and quiet 4xx logs."""

    records: Records

    @pytest.fixture(autouse=True)
    def _harness(self, db: None) -> Iterator[None]:
        self.records = Records()
        # Thousands of deliberate 4xx responses would each log a warning; 5xx still log.
        request_log = logging.getLogger("django.request")
        level = request_log.level
        request_log.setLevel(logging.ERROR)
        yield
        request_log.setLevel(level)


class EndpointContract(APITest):
    """The contract every record endpoint keeps; see the module docstring."""

    basename: ClassVar[str]
    model: ClassVar[type[Model]]
    conditional: ClassVar[bool] = False

    # -- what each endpoint declares ---------------------------------------------------------

    def make(self) -> Model:
        """A fresh record that nothing else refers to (so it can be deleted)."""
        raise NotImplementedError

    def create_payload(self) -> dict[str, Any]:
        """A valid POST body for a new record."""
        raise NotImplementedError

    def update_payload(self, record: Model) -> dict[str, Any]:
        """A valid PATCH body changing at least one field of ``record``."""
        raise NotImplementedError

    def invalid_payloads(self) -> Iterator[tuple[dict[str, Any], str]]:
        """POST bodies that break one model rule each, with the field the 400 must name."""
        raise NotImplementedError

    # -- plumbing ----------------------------------------------------------------------------

    def list_url(self) -> str:
        return reverse(f"{self.basename}-list")

    def detail_url(self, record: Model | int) -> str:
        pk = record.pk if isinstance(record, Model) else record
        return reverse(f"{self.basename}-detail", args=[pk])

    def history_url(self, record: Model | int) -> str:
        pk = record.pk if isinstance(record, Model) else record
        return reverse(f"{self.basename}-history", args=[pk])

    def if_match(self, record: Model) -> dict[str, str]:
        """The If-Match header a conditional endpoint needs to write ``record`` (current)."""
        if not self.conditional:
            return {}
        return {"HTTP_IF_MATCH": type(record)._default_manager.get(pk=record.pk).etag}

    def admin(self, api_client_for: Any) -> APIClient:
        client: APIClient = api_client_for(POLICY_ADMIN)
        return client

    # -- permissions -------------------------------------------------------------------------

    @pytest.mark.parametrize("role", ROLE_NAMES)
    def test_role_matrix(self, role: str, api_client_for: Any) -> None:
        client = api_client_for(role)
        expected = EXPECTED_STATUS[role]
        target = self.make()
        got: dict[str, int] = {}

        response = client.get(self.list_url())
        got["list"] = response.status_code
        if role == ANONYMOUS:
            assert response["WWW-Authenticate"].startswith("Token")
        got["retrieve"] = client.get(self.detail_url(target)).status_code
        got["history"] = client.get(self.history_url(target)).status_code

        count = self.model._default_manager.count()
        got["create"] = client.post(
            self.list_url(), self.create_payload(), format="json"
        ).status_code
        if expected["create"] != 201:
            assert self.model._default_manager.count() == count, "refused create wrote a row"

        before = state_of(target)
        got["update"] = client.patch(
            self.detail_url(target),
            self.update_payload(target),
            format="json",
            **self.if_match(target),
        ).status_code
        if expected["update"] != 200:
            assert state_of(target) == before, "refused update changed the record"

        victim = self.make()
        got["delete"] = client.delete(self.detail_url(victim), **self.if_match(victim)).status_code
        if expected["delete"] != 204:
            assert self.model._default_manager.filter(pk=victim.pk).exists()

        assert got == expected

    # -- reads and writes --------------------------------------------------------------------

    def test_create_then_retrieve_round_trip(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        payload = self.create_payload()
        created = client.post(self.list_url(), payload, format="json")
        assert created.status_code == 201, created.json()
        fetched = client.get(self.detail_url(created.json()["id"])).json()
        for name, value in payload.items():
            assert _normalise(fetched[name]) == _normalise(value), name

    def test_put_replaces_and_patch_changes_only_named_fields(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        record = self.make()
        changes = self.update_payload(record)
        current = client.get(self.detail_url(record)).json()
        serializer = self._serializer()
        writable = {
            name: current[name] for name, field in serializer.fields.items() if not field.read_only
        }
        put = client.put(
            self.detail_url(record), {**writable, **changes}, format="json", **self.if_match(record)
        )
        assert put.status_code == 200, put.json()
        for name, value in changes.items():
            assert _normalise(put.json()[name]) == _normalise(value), name

        untouched = {k: v for k, v in put.json().items() if k not in changes}
        patch = client.patch(
            self.detail_url(record), changes, format="json", **self.if_match(record)
        )
        assert patch.status_code == 200, patch.json()
        for name, value in untouched.items():
            if name not in {"revision", "etag"}:
                assert patch.json()[name] == value, name

    def test_delete_then_history_survives(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        record = self.make()
        assert client.delete(self.detail_url(record), **self.if_match(record)).status_code == 204
        assert not self.model._default_manager.filter(pk=record.pk).exists()
        assert client.get(self.detail_url(record)).status_code == 404
        history = client.get(self.history_url(record))
        assert history.status_code == 200
        newest = history.json()["results"][0]
        assert (newest["kind"], newest["user"]) == ("deleted", "admin-user")
        assert all(change["after"] is None for change in newest["changes"])

    def test_unknown_id_is_404_in_the_error_contract(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        missing = 987_654_321
        for response in (
            client.get(self.detail_url(missing)),
            client.get(self.history_url(missing)),
            client.patch(self.detail_url(missing), {}, format="json", HTTP_IF_MATCH="*"),
            client.delete(self.detail_url(missing), HTTP_IF_MATCH="*"),
        ):
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "not_found"
        too_long = "9" * 40
        assert client.get(f"{self.list_url()}{too_long}/").status_code == 404

    def test_list_is_paginated(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        for _ in range(3):
            self.make()
        total = self.model._default_manager.count()
        page = client.get(self.list_url(), {"limit": 2, "offset": 1}).json()
        assert page["count"] == total
        assert len(page["results"]) == min(2, total - 1)
        beyond = client.get(self.list_url(), {"offset": 10**15}).json()
        assert beyond["results"] == []
        past_the_bound = client.get(self.list_url(), {"offset": 10**15 + 1})
        assert past_the_bound.status_code == 400
        assert past_the_bound.json()["error"]["fields"].keys() == {"offset"}

    def test_list_query_count_does_not_grow(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        self.make()
        client.get(self.list_url())  # warm the role lookup cached on the user
        small = self._count_list_queries(client)
        for _ in range(5):
            self.make()
        large = self._count_list_queries(client)
        assert large == small

    def _count_list_queries(self, client: APIClient) -> int:
        with CaptureQueriesContext(connection) as queries:
            response = client.get(self.list_url())
        assert response.status_code == 200
        return len(queries)

    # -- validation --------------------------------------------------------------------------

    def test_model_rules_apply_to_api_writes(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        cases = list(self.invalid_payloads())
        assert cases, "declare at least one invalid payload"
        for payload, field in cases:
            count = self.model._default_manager.count()
            response = client.post(self.list_url(), payload, format="json")
            assert response.status_code == 400, (field, response.json())
            assert field in error_fields(response), (field, response.json())
            assert self.model._default_manager.count() == count

    # -- audit history -----------------------------------------------------------------------

    def test_history_shows_api_change_with_user_and_before_after(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        record = self.make()
        before = client.get(self.detail_url(record)).json()
        changes = self.update_payload(record)
        response = client.patch(
            self.detail_url(record), changes, format="json", **self.if_match(record)
        )
        assert response.status_code == 200, response.json()

        history = client.get(self.history_url(record)).json()
        newest = history["results"][0]
        assert newest["kind"] == "changed"
        assert newest["user"] == "admin-user"
        recorded = {c["field"]: (c["before"], c["after"]) for c in newest["changes"]}
        for name, value in changes.items():
            assert name in recorded, (name, recorded)
            assert _normalise(recorded[name][0]) == _normalise(before[name]), name
            assert _normalise(recorded[name][1]) == _normalise(value), name
        # The oldest entry is the creation, with every field's initial value.
        oldest = client.get(self.history_url(record), {"offset": history["count"] - 1}).json()
        assert oldest["results"][-1]["kind"] == "created"

    # -- nothing reaches a 5xx ---------------------------------------------------------------

    def test_hostile_field_values_never_5xx(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        base = self.create_payload()
        record = self.make()
        # Wrong types are refused field by field, all fields at once: one body per value.
        for value in HOSTILE_VALUES:
            body = dict.fromkeys(self._writable_fields(), value)
            for method, url in (("post", self.list_url()), ("patch", self.detail_url(record))):
                response = getattr(client, method)(url, body, format="json", HTTP_IF_MATCH="*")
                _assert_client_error_or_success(response, (method, value))
        # Values that parse can reach the model's rules and the database: one field at a time,
        # the rest valid, on create and on update.
        for name in self._distinct_fields():
            for value in EXTREME_VALUES:
                created = client.post(self.list_url(), {**base, name: value}, format="json")
                _assert_client_error_or_success(created, ("POST", name, value))
                changed = client.patch(
                    self.detail_url(record), {name: value}, format="json", HTTP_IF_MATCH="*"
                )
                _assert_client_error_or_success(changed, ("PATCH", name, value))
        # Every record the endpoint now holds still renders.
        assert client.get(self.list_url(), {"limit": 1000}).status_code == 200

    def test_malformed_bodies_never_5xx(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        record = self.make()
        everything_too_big = json.dumps(dict.fromkeys(self._writable_fields(), "__BIG__"))
        bodies = (
            *MALFORMED_BODIES,
            ("application/json", everything_too_big.replace('"__BIG__"', "1e999").encode()),
        )
        for content_type, raw in bodies:
            for method, url in (
                ("post", self.list_url()),
                ("put", self.detail_url(record)),
                ("patch", self.detail_url(record)),
            ):
                response = getattr(client, method)(
                    url, data=raw, content_type=content_type, HTTP_IF_MATCH="*"
                )
                _assert_client_error_or_success(response, (method, content_type, raw[:40]))

    def test_hostile_query_strings_never_5xx(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        self.make()
        params = {"ordering", "search", "limit", "offset"}
        filterset = getattr(self._view(), "filterset_class", None)
        if filterset is not None:
            params |= set(filterset.base_filters)
        for param in sorted(params):
            for value in HOSTILE_QUERY_VALUES:
                response = client.get(self.list_url(), {param: value})
                _assert_client_error_or_success(response, ("GET", param, value))
        # Ordering by any field the records show is either applied or ignored, never a 500.
        for name in self._serializer().fields:
            response = client.get(self.list_url(), {"ordering": f"{name},-{name}"})
            assert response.status_code == 200, name

    def _view(self) -> Any:
        return next(view for _, view, name in router.registry if name == self.basename)

    def _serializer(self) -> Any:
        return self._view().serializer_class()

    def _writable_fields(self) -> list[str]:
        return [name for name, f in self._serializer().fields.items() if not f.read_only]

    def _distinct_fields(self) -> list[str]:
        """One writable field per distinct parsing and validation (type, nullability, rules).

        Eight token percentiles with the same type and validators are parsed and checked
        alike; trying one of them keeps the battery's runtime in proportion.
        """
        seen: dict[tuple[Any, ...], str] = {}
        serializer = self._serializer()
        for name in self._writable_fields():
            field = serializer.fields[name]
            signature = (
                type(field).__name__,
                field.allow_null,
                getattr(field, "queryset", None) is not None and field.queryset.model,
                tuple(sorted(_validator_signature(v) for v in field.validators)),
            )
            seen.setdefault(signature, name)
        return sorted(seen.values())


class ConditionalEndpointContract(EndpointContract):
    """The contract of records updated under optimistic concurrency (If-Match)."""

    conditional = True

    def test_get_returns_the_etag(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        record = self.make()
        response = client.get(self.detail_url(record))
        etag = type(record)._default_manager.get(pk=record.pk).etag
        assert response["ETag"] == etag == response.json()["etag"]
        again = client.get(self.detail_url(record), HTTP_IF_NONE_MATCH=etag)
        assert again.status_code == 304

    def test_write_without_if_match_is_428_and_changes_nothing(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        record = self.make()
        before = state_of(record)
        patch = client.patch(self.detail_url(record), self.update_payload(record), format="json")
        assert patch.status_code == 428
        assert patch.json()["error"]["code"] == "precondition_required"
        assert client.delete(self.detail_url(record)).status_code == 428
        assert state_of(record) == before

    def test_stale_if_match_is_412_and_changes_nothing(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        record = self.make()
        stale = type(record)._default_manager.get(pk=record.pk).etag
        # Someone else changes the record after we read it.
        first = client.patch(
            self.detail_url(record), self.update_payload(record), format="json", HTTP_IF_MATCH=stale
        )
        assert first.status_code == 200, first.json()
        before = state_of(record)
        for method in ("put", "patch"):
            response = getattr(client, method)(
                self.detail_url(record),
                {**client.get(self.detail_url(record)).json(), **self.update_payload(record)},
                format="json",
                HTTP_IF_MATCH=stale,
            )
            assert response.status_code == 412, response.json()
            assert response.json()["error"]["code"] == "precondition_failed"
        assert client.delete(self.detail_url(record), HTTP_IF_MATCH=stale).status_code == 412
        assert (
            client.patch(
                self.detail_url(record),
                {},
                format="json",
                HTTP_IF_MATCH='W/"' + stale.strip('"') + '"',
            ).status_code
            == 412
        )
        assert state_of(record) == before

    def test_conditional_write_returns_the_new_etag(self, api_client_for: Any) -> None:
        client = self.admin(api_client_for)
        record = self.make()
        etag = type(record)._default_manager.get(pk=record.pk).etag
        response = client.patch(
            self.detail_url(record),
            self.update_payload(record),
            format="json",
            HTTP_IF_MATCH=f'"somewhere-else", {etag}',
        )
        assert response.status_code == 200, response.json()
        fresh = type(record)._default_manager.get(pk=record.pk)
        assert response["ETag"] == fresh.etag == response.json()["etag"] != etag
        # The new ETag is the one that works next; the old one no longer does.
        follow = client.patch(
            self.detail_url(record), {}, format="json", HTTP_IF_MATCH=response["ETag"]
        )
        assert follow.status_code == 200
        created = client.post(self.list_url(), self.create_payload(), format="json")
        assert created.status_code == 201
        assert created["ETag"] == created.json()["etag"]


def _validator_signature(validator: Any) -> str:
    deconstruct = getattr(validator, "deconstruct", None)
    if deconstruct is not None:
        path, args, kwargs = deconstruct()
        return f"{path}{args}{sorted(kwargs.items(), key=str)}"
    return getattr(validator, "__qualname__", type(validator).__qualname__)


def _assert_client_error_or_success(response: Response, what: tuple[Any, ...]) -> None:
    assert response.status_code < 500, (what, response.status_code)
    if response.status_code >= 400:
        assert "error" in response.json(), (what, response.content[:200])


class ReportEndpointContract(APITest):
    """The contract of read-only report endpoints (no records: query parameters in, rows out).

    Declare ``urls`` (every path the contract covers), ``read_status`` (the status a reader
    gets, 200 unless the endpoint needs set-up) and ``bad_parameters`` (query strings that
    break one rule each, with the parameter the 400 must name); ``setup_reports`` builds what
    the reports read. The base class tests the role matrix (every reader role gets
    ``read_status``, no role 403, anonymous 401, writes refused), the bad parameters (400
    naming the parameter, in JSON, with nothing else broken) and hostile query strings
    (never a 5xx).
    """

    urls: ClassVar[tuple[str, ...]]
    read_status: ClassVar[int] = 200
    json_only: ClassVar[frozenset[str]] = frozenset()
    hostile_parameters: ClassVar[tuple[str, ...]] = ("format", "other")

    def setup_reports(self) -> None:
        """Build the records the reports read (none by default)."""

    def bad_parameters(self) -> Iterator[tuple[str, dict[str, str], str]]:
        """(url, query parameters, the parameter the 400 names) for each broken rule."""
        raise NotImplementedError

    @pytest.mark.parametrize("role", ROLE_NAMES)
    def test_role_matrix(self, role: str, api_client_for: Any) -> None:
        self.setup_reports()
        client = api_client_for(role)
        expected = {NO_ROLE: 403, ANONYMOUS: 401}.get(role, self.read_status)
        for url in self.urls:
            response = client.get(url)
            assert response.status_code == expected, (url, role, response.content[:200])
            if role == ANONYMOUS:
                assert response["WWW-Authenticate"].startswith("Token")
            if response.status_code >= 400:
                assert "error" in response.json()
            for method in ("post", "put", "patch", "delete"):
                refused = getattr(client, method)(url, {}, format="json")
                assert refused.status_code in (401, 403, 405), (method, url, role)

    def test_bad_parameters_are_400_naming_them(self, api_client_for: Any) -> None:
        self.setup_reports()
        client = api_client_for(VIEWER)
        cases = list(self.bad_parameters())
        assert cases, "declare at least one bad parameter"
        for url, params, field in cases:
            formats: tuple[dict[str, str], ...] = (
                ({},) if url in self.json_only else ({}, {"format": "csv"})
            )
            for extra in formats:
                response = client.get(url, {**params, **extra})
                assert response.status_code == 400, (url, params, response.content[:300])
                assert response["Content-Type"].startswith("application/json")
                assert field in error_fields(response), (url, params, response.json())

    def test_hostile_query_strings_never_5xx(self, api_client_for: Any) -> None:
        self.setup_reports()
        client = api_client_for(VIEWER)
        params = {name for _, query, _ in self.bad_parameters() for name in query}
        for url in self.urls:
            for param in sorted(params | set(self.hostile_parameters)):
                for value in HOSTILE_QUERY_VALUES:
                    response = client.get(url, {param: value})
                    _assert_client_error_or_success(response, ("GET", url, param, value))
