"""The shipped webhook receiver: signature checks (tampered, stale, wrong secret refused),
one applied delivery per idempotency key, the latest plan per region, told-to-fail modes,
and its HTTP control endpoints."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from planner import signing
from workers.simulators.webhook_receiver import WebhookReceiver, main

SECRET = "receiver-test-secret-0123456789"


def document(region: str = "eu", version: int = 1) -> dict[str, Any]:
    return {"format": "headroom-allocation/v1", "region": region, "plan": {"version": version}}


def post(
    url: str,
    body: bytes,
    *,
    key: str = "k1",
    secret: str = SECRET,
    timestamp: int | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any]]:
    signed = signing.signed_headers(
        secret=secret, idempotency_key=key, body=body, timestamp=timestamp
    )
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", **signed, **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.fixture
def receiver() -> Iterator[WebhookReceiver]:
    with WebhookReceiver(secret=SECRET, control=True) as running:
        yield running


def test_a_signed_delivery_is_applied(receiver: WebhookReceiver) -> None:
    body = json.dumps(document()).encode()
    status, answer = post(receiver.url, body)
    assert (status, answer["duplicate"], answer["idempotency_key"]) == (200, False, "k1")
    (delivery,) = receiver.deliveries.values()
    assert (delivery.region, delivery.plan_version, delivery.document) == ("eu", 1, document())


def test_a_tampered_body_is_refused_and_not_recorded(receiver: WebhookReceiver) -> None:
    body = json.dumps(document(version=1)).encode()
    headers = signing.signed_headers(secret=SECRET, idempotency_key="k1", body=body)
    tampered = body.replace(b'"version": 1', b'"version": 9')
    assert tampered != body
    request = urllib.request.Request(receiver.url, data=tampered, method="POST", headers=headers)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 401
    assert "signature does not match" in json.loads(refused.value.read())["detail"]
    assert receiver.deliveries == {}


def test_a_swapped_key_breaks_the_signature(receiver: WebhookReceiver) -> None:
    body = json.dumps(document()).encode()
    headers = signing.signed_headers(secret=SECRET, idempotency_key="k1", body=body)
    headers[signing.KEY_HEADER] = "k2"
    assert receiver.receive(headers, body)[0] == 401


def test_wrong_secret_missing_headers_and_stale_timestamps_are_refused(
    receiver: WebhookReceiver,
) -> None:
    body = json.dumps(document()).encode()
    assert post(receiver.url, body, secret="another-secret-entirely")[0] == 401
    old = int(time.time()) - signing.DEFAULT_TOLERANCE_S - 5
    status, answer = post(receiver.url, body, timestamp=old)
    assert status == 401 and "tolerance" in answer["detail"]
    future = int(time.time()) + signing.DEFAULT_TOLERANCE_S + 5
    assert post(receiver.url, body, timestamp=future)[0] == 401
    request = urllib.request.Request(receiver.url, data=body, method="POST")
    with pytest.raises(urllib.error.HTTPError) as unsigned:
        urllib.request.urlopen(request, timeout=5)
    assert unsigned.value.code == 401
    assert receiver.deliveries == {}


def test_signature_helpers_agree_and_accept_a_rotation_list() -> None:
    body = b'{"a":1}'
    headers = signing.signed_headers(secret=SECRET, idempotency_key="k", body=body, timestamp=100)
    digest = signing.signature(secret=SECRET, timestamp=100, idempotency_key="k", body=body)
    assert headers[signing.SIGNATURE_HEADER] == f"v1={digest}"
    assert signing.verify(secret=SECRET, headers=headers, body=body, now=100) == "k"
    # A sender mid-rotation signs with both secrets; either matching is enough.
    old = signing.signature(
        secret="old-secret-0123456789", timestamp=100, idempotency_key="k", body=body
    )
    rotating = {**headers, signing.SIGNATURE_HEADER: f"v1={old}, v1={digest}"}
    assert signing.verify(secret=SECRET, headers=rotating, body=body, now=100) == "k"
    # Header names are case-insensitive.
    lower = {name.lower(): value for name, value in headers.items()}
    assert signing.verify(secret=SECRET, headers=lower, body=body, now=100) == "k"
    with pytest.raises(signing.SignatureError):
        signing.verify(
            secret=SECRET,
            headers={**headers, signing.SIGNATURE_HEADER: "v0=abc"},
            body=body,
            now=100,
        )


def test_a_duplicate_key_is_acknowledged_not_applied_twice(receiver: WebhookReceiver) -> None:
    first = json.dumps(document(version=1)).encode()
    assert post(receiver.url, first, key="same")[0] == 200
    status, answer = post(receiver.url, first, key="same")
    assert (status, answer["duplicate"]) == (200, True)
    assert len(receiver.deliveries) == 1
    assert [r.reason for r in receiver.requests] == [
        "applied",
        "duplicate: acknowledged, not applied again",
    ]


def test_latest_keeps_the_highest_plan_version_per_region(receiver: WebhookReceiver) -> None:
    post(receiver.url, json.dumps(document("eu", 2)).encode(), key="eu-2")
    post(receiver.url, json.dumps(document("eu", 1)).encode(), key="eu-1")  # late
    post(receiver.url, json.dumps(document("us", 1)).encode(), key="us-1")
    assert {r: d.plan_version for r, d in receiver.latest.items()} == {"eu": 2, "us": 1}
    assert len(receiver.deliveries) == 3


def test_fail_next_before_and_after_applying(receiver: WebhookReceiver) -> None:
    body = json.dumps(document()).encode()
    receiver.fail_next(2, status=503)
    assert post(receiver.url, body, key="a")[0] == 503
    assert post(receiver.url, body, key="a")[0] == 503
    assert receiver.deliveries == {}
    assert post(receiver.url, body, key="a")[0] == 200
    receiver.fail_next(1, status=500, after_apply=True)
    assert post(receiver.url, body, key="b")[0] == 500
    assert set(receiver.deliveries) == {"a", "b"}
    assert post(receiver.url, body, key="b")[1]["duplicate"] is True


def test_bodies_that_are_not_json_objects_are_400(receiver: WebhookReceiver) -> None:
    assert post(receiver.url, b"not json")[0] == 400
    assert post(receiver.url, b"[1, 2]")[0] == 400
    assert receiver.deliveries == {}


def test_control_endpoints(receiver: WebhookReceiver) -> None:
    base = receiver.url.rsplit("/", 1)[0]
    control = urllib.request.Request(f"{base}/fail-next?count=1&status=429", method="POST")
    with urllib.request.urlopen(control, timeout=5) as response:
        assert response.status == 200
    body = json.dumps(document("ap", 3)).encode()
    assert post(receiver.url, body, key="x")[0] == 429
    assert post(receiver.url, body, key="x")[0] == 200
    with urllib.request.urlopen(f"{base}/deliveries", timeout=5) as response:
        (listed,) = json.loads(response.read())
    assert (listed["idempotency_key"], listed["region"]) == ("x", "ap")
    with urllib.request.urlopen(f"{base}/regions", timeout=5) as response:
        assert json.loads(response.read())["ap"]["plan"]["version"] == 3


def test_without_control_reads_are_not_served() -> None:
    with WebhookReceiver(secret=SECRET) as quiet:
        base = quiet.url.rsplit("/", 1)[0]
        with pytest.raises(urllib.error.HTTPError) as hidden:
            urllib.request.urlopen(f"{base}/deliveries", timeout=5)
        assert hidden.value.code == 404


def test_command_line_needs_the_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HEADROOM_WEBHOOK_SECRET", raising=False)
    assert main(["--port", "0"]) == 2
    with pytest.raises(ValueError):
        WebhookReceiver(secret="")
