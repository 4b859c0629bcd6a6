"""Webhook signatures: HMAC-SHA256 over the timestamp, the idempotency key and the body.

The sender computes, for each attempt::

    signed  = f"{timestamp}.{idempotency_key}.".encode() + body
    digest  = HMAC-SHA256(secret, signed), hex
    headers = Headroom-Timestamp: <timestamp>         (Unix seconds, an integer)
              Headroom-Idempotency-Key: <key>
              Headroom-Signature: v1=<digest>

A receiver recomputes the digest from the raw body bytes (before any JSON parsing), compares it
in constant time, and refuses a timestamp further than its tolerance from its own clock (a
replay of a captured request, once the tolerance has passed, fails). Signing the key too means
a captured body cannot be replayed under a fresh key to slip past deduplication.

A wire contract between the control plane (``controlplane.emission.sinks.webhook`` signs) and
its receivers, so it lives with the other formats in ``planner``: no Django, and the shipped
receiver (``workers.simulators.webhook_receiver``) and any Python consumer can import it.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

SCHEME = "v1"
TIMESTAMP_HEADER = "Headroom-Timestamp"
KEY_HEADER = "Headroom-Idempotency-Key"
SIGNATURE_HEADER = "Headroom-Signature"
# A receiver's default tolerance between the signed timestamp and its clock, seconds.
DEFAULT_TOLERANCE_S = 300


class SignatureError(ValueError):
    """The request's signature is missing, malformed, stale or wrong."""


def signature(*, secret: str, timestamp: int, idempotency_key: str, body: bytes) -> str:
    """The hex HMAC-SHA256 digest of ``{timestamp}.{idempotency_key}.`` + ``body``."""
    signed = f"{timestamp}.{idempotency_key}.".encode() + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signed_headers(
    *, secret: str, idempotency_key: str, body: bytes, timestamp: int | None = None
) -> dict[str, str]:
    """The three headers of one signed request; ``timestamp`` defaults to now (Unix s)."""
    moment = int(time.time()) if timestamp is None else timestamp
    digest = signature(secret=secret, timestamp=moment, idempotency_key=idempotency_key, body=body)
    return {
        TIMESTAMP_HEADER: str(moment),
        KEY_HEADER: idempotency_key,
        SIGNATURE_HEADER: f"{SCHEME}={digest}",
    }


def header(headers: Mapping[str, str], name: str) -> str:
    # HTTP header names are case-insensitive; callers may pass any mapping.
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    raise SignatureError(f"missing {name} header")


def verify(
    *,
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> str:
    """Check a request's signature; return its idempotency key, or raise ``SignatureError``.

    ``now`` (Unix seconds) defaults to the current time. Several ``v1=`` values separated by
    commas are accepted (any one matching), so a sender may sign with an old and a new secret
    while a rotation is under way.
    """
    raw_timestamp = header(headers, TIMESTAMP_HEADER).strip()
    key = header(headers, KEY_HEADER)
    raw_signature = header(headers, SIGNATURE_HEADER)
    if not raw_timestamp.isdigit():
        raise SignatureError(f"{TIMESTAMP_HEADER} must be whole Unix seconds")
    timestamp = int(raw_timestamp)
    clock = time.time() if now is None else now
    if abs(clock - timestamp) > tolerance_s:
        raise SignatureError(f"timestamp outside the {tolerance_s:g} s tolerance")
    expected = signature(secret=secret, timestamp=timestamp, idempotency_key=key, body=body)
    offered = [
        part.strip()[len(SCHEME) + 1 :]
        for part in raw_signature.split(",")
        if part.strip().startswith(f"{SCHEME}=")
    ]
    if not offered:
        raise SignatureError(f"{SIGNATURE_HEADER} has no {SCHEME}= value")
    if not any(hmac.compare_digest(expected, candidate) for candidate in offered):
        raise SignatureError("signature does not match")
    return key
