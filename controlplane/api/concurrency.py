"""Optimistic concurrency for revisioned records (tiers, tenants, tenant quotas).

A GET of one record returns its ``ETag`` (the model's ``.etag``, which changes with every
save). PUT, PATCH and DELETE must send it back in ``If-Match``:

- no ``If-Match`` → 428 Precondition Required (the strict choice: a client that never read
  the record cannot overwrite someone else's change by accident);
- an ``If-Match`` that does not name the current revision → 412 Precondition Failed, and
  nothing changes;
- ``If-Match: *`` matches any current revision (RFC 9110), for tools that mean to overwrite.

The check and the write happen in one transaction, after taking the row's write lock, so two
writers holding the same ETag cannot both win: the second waits for the first to commit, then
sees the new revision and gets 412.
"""

from __future__ import annotations

from typing import Any

from django.db.models import F
from django.utils.http import parse_etags
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter
from rest_framework import exceptions, status
from rest_framework.request import Request

from controlplane.core.records import Revisioned


class PreconditionFailed(exceptions.APIException):
    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_detail = (
        "If-Match does not match the record's current revision: someone changed it since you "
        "read it. GET it again, reapply your change and send the new ETag."
    )
    default_code = "precondition_failed"


class PreconditionRequired(exceptions.APIException):
    status_code = 428  # RFC 6585; DRF's status module has no name for it.
    default_detail = (
        "This record is updated under optimistic concurrency: send If-Match with the ETag "
        "from your last GET of it."
    )
    default_code = "precondition_required"


def require_if_match(request: Request, current_etag: str) -> None:
    """Raise 428 when ``If-Match`` is missing, 412 when it does not name ``current_etag``.

    Comparison is strong (RFC 9110 §13.1.1): a weak tag ``W/"..."`` never matches.
    """
    header = request.headers.get("If-Match")
    if header is None or not header.strip():
        raise PreconditionRequired()
    tags = parse_etags(header)
    if tags == ["*"]:
        return
    if current_etag not in tags:
        raise PreconditionFailed()


def etag_matches_weakly(if_none_match: str, current_etag: str) -> bool:
    """Whether an ``If-None-Match`` header names ``current_etag`` (weak comparison, for GET)."""
    tags = {tag.removeprefix("W/") for tag in parse_etags(if_none_match)}
    return "*" in tags or current_etag in tags


def lock_for_write(model: type[Revisioned], pk: Any) -> None:
    """Take the write lock on one row before it is read for a conditional write.

    A no-op ``UPDATE`` locks the row on PostgreSQL (as ``SELECT ... FOR UPDATE`` would) and,
    on SQLite, which has no row locks, takes the database's write lock before any read, so
    the revision read next cannot change until this transaction ends. A missing row locks
    nothing; the lookup that follows answers 404.
    """
    model._default_manager.filter(pk=pk).update(revision=F("revision"))


IF_MATCH_PARAMETER = OpenApiParameter(
    name="If-Match",
    type=OpenApiTypes.STR,
    location=OpenApiParameter.HEADER,
    required=True,
    description=(
        "The ETag from your last GET of this record. Missing: 428. Stale: 412 and nothing "
        "changes. `*` matches any revision."
    ),
)

IF_NONE_MATCH_PARAMETER = OpenApiParameter(
    name="If-None-Match",
    type=OpenApiTypes.STR,
    location=OpenApiParameter.HEADER,
    required=False,
    description="An ETag from an earlier GET: 304 with no body while the record is unchanged.",
)

ETAG_HEADER = OpenApiParameter(
    name="ETag",
    type=OpenApiTypes.STR,
    location=OpenApiParameter.HEADER,
    response=[200, 201, 304],
    required=True,
    description="The record's current revision, for If-Match on a write.",
)
