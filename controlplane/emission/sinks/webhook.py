"""Webhook sink: POST the region's document, signed, and classify the answer.

- 2xx: delivered (the receiver acknowledged it; a duplicate it acknowledges counts too).
- 408, 429, 5xx, no answer (refused, reset, timed out): retry, honouring ``Retry-After``.
- any other status (4xx, and 3xx: redirects are not followed, since a signed delivery should
  reach the configured URL and nothing else): failed, not retried; the error is kept.
"""

from __future__ import annotations

import email.utils
import http.client
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

from controlplane.emission.sinks import Delivery, DeliveryResult, Outcome, canonical_json
from planner import signing

if TYPE_CHECKING:
    from controlplane.emission.models import AllocationSink

USER_AGENT = "Headroom-Emission/1"
RETRYABLE_4XX = frozenset({408, 429})
# How much of an error response's body is kept in the outbox row, characters.
ERROR_BODY_CHARS = 500


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: object, **kwargs: object) -> None:
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delta seconds or an HTTP date)."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        moment = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        return None
    clock = time.time() if now is None else now
    return max(0.0, moment.timestamp() - clock)


def classify(status: int) -> Outcome:
    """What an HTTP status means for an outbox row."""
    if 200 <= status < 300:
        return Outcome.DELIVERED
    if status in RETRYABLE_4XX or status >= 500:
        return Outcome.RETRY
    return Outcome.FAILED


def deliver(sink: AllocationSink, delivery: Delivery) -> DeliveryResult:
    try:
        body = canonical_json(delivery.payload)
    except ValueError as exc:
        return DeliveryResult(Outcome.FAILED, error=f"the document is not valid JSON: {exc}")
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        **signing.signed_headers(
            secret=sink.secret, idempotency_key=delivery.idempotency_key, body=body
        ),
    }
    request = urllib.request.Request(sink.url, data=body, headers=headers, method="POST")
    try:
        with _opener.open(request, timeout=sink.timeout_s) as response:
            status = int(response.status)
            response.read(ERROR_BODY_CHARS)
            retry_header = response.headers.get("Retry-After")
            text = ""
    except urllib.error.HTTPError as exc:
        status = int(exc.code)
        retry_header = exc.headers.get("Retry-After") if exc.headers else None
        try:
            text = exc.read(ERROR_BODY_CHARS).decode("utf-8", "replace")
        except (OSError, http.client.HTTPException):
            text = ""
        exc.close()
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        reason = getattr(exc, "reason", exc)
        return DeliveryResult(Outcome.RETRY, error=f"no answer from {sink.url}: {reason}")
    except (http.client.HTTPException, OSError) as exc:
        return DeliveryResult(Outcome.RETRY, error=f"no answer from {sink.url}: {exc!r}")

    outcome = classify(status)
    if outcome is Outcome.DELIVERED:
        return DeliveryResult(outcome, status_code=status)
    error = f"HTTP {status} from {sink.url}"
    if text.strip():
        error += f": {text.strip()}"
    return DeliveryResult(
        outcome,
        status_code=status,
        error=error,
        retry_after_s=retry_after_s(retry_header) if outcome is Outcome.RETRY else None,
    )
