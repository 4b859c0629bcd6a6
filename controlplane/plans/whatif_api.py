"""What-if previews over the API: ``POST /api/plans/what-ifs/`` queues one, and
``GET /api/plans/what-ifs/{id}/`` follows it.

Any role may ask; the preview is solved off the web worker (``plans.whatif_jobs``), so the
POST answers 202 with the job (``queued``) and its address in ``Location``; poll it until
``status`` is ``succeeded`` (``result`` holds the preview) or ``failed`` (``error`` says why).
A job is readable by whoever asked for it and by policy admins; to anyone else it is a 404.
The bounds answer 429 (this user's unfinished what-ifs, or a viewer's hourly rate) or 503
(the queue is full), each with ``Retry-After``. Tenant keys cannot ask (403).
"""

from __future__ import annotations

import math
from typing import Any

from django.db.models import QuerySet
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.core.api import ID_PATTERN, QueryGuardMixin, TenantScopeMixin
from controlplane.core.parsers import StrictJSONParser
from controlplane.core.roles import ROLES, RolePermission
from controlplane.core.serializers import (
    StrictBooleanField,
    StrictCharField,
    StrictFieldsMixin,
    StrictFloatField,
    read_only_by,
)
from controlplane.core.validators import RTT_MS
from controlplane.plans.models import WhatIfJob
from controlplane.plans.whatif import MAX_PROMPT_DELTA, MAX_TRAFFIC_FACTOR, WhatIfChange
from controlplane.plans.whatif_jobs import WhatIfRefused, queue_position, whatif_job_for
from controlplane.plans.whatif_jobs import whatif_submit as submit


class WhatIfBusy(exceptions.APIException):
    """The what-if queue is full: 503 with ``Retry-After``."""

    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The what-if queue is full; try again shortly."
    default_code = "busy"

    def __init__(self, message: str, wait: int) -> None:
        super().__init__(message)
        self.wait = wait


class _Finite(StrictFloatField):
    def to_internal_value(self, data: Any) -> float:
        value = super().to_internal_value(data)
        if not math.isfinite(value):
            raise serializers.ValidationError("Give a finite number.")
        return value


class WhatIfRequestSerializer(StrictFieldsMixin, serializers.Serializer[Any]):
    """A change to one tenant; a part left out stays as it is."""

    unknown_message = "Unknown field."

    tenant = StrictCharField(max_length=200, help_text="The tenant's name.")
    residency_regions = serializers.ListField(
        child=StrictCharField(max_length=200),
        required=False,
        allow_null=True,
        max_length=1000,
        help_text="The region names its data may be served in; [] for no region list.",
    )
    tier = StrictCharField(
        max_length=200, required=False, allow_null=True, help_text="The tier's name."
    )
    traffic_factor = _Finite(
        required=False,
        default=1.0,
        min_value=0.0,
        max_value=MAX_TRAFFIC_FACTOR,
        help_text="Its requests per second multiplied by this.",
    )
    prompt_tokens_delta = _Finite(
        required=False,
        default=0.0,
        min_value=-MAX_PROMPT_DELTA,
        max_value=MAX_PROMPT_DELTA,
        help_text="Tokens added to each request's prompt (negative to shorten).",
    )

    spill_allowed = StrictBooleanField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The tenant's spill permission: may its traffic be served outside its home "
        "region (true or false; null or absent keeps it).",
    )
    max_spill_rtt_ms = _Finite(
        required=False,
        allow_null=True,
        default=None,
        min_value=RTT_MS.low,
        max_value=RTT_MS.high,
        help_text="The largest round trip spill may add, ms (needed to allow spill when the "
        "tenant has none).",
    )

    def change(self) -> WhatIfChange:
        data = self.validated_data
        regions = data.get("residency_regions")
        rtt = data.get("max_spill_rtt_ms")
        return WhatIfChange(
            tenant=data["tenant"],
            residency_regions=None if regions is None else tuple(sorted(set(regions))),
            tier=data.get("tier"),
            traffic_factor=float(data["traffic_factor"]),
            prompt_tokens_delta=float(data["prompt_tokens_delta"]),
            spill_allowed=data.get("spill_allowed"),
            max_spill_rtt_ms=None if rtt is None else float(rtt),
        )


class WhatIfRegionSerializer(serializers.Serializer[Any]):
    region = serializers.CharField()
    replicas_before = serializers.IntegerField()
    replicas_after = serializers.IntegerField()
    replica_change = serializers.IntegerField()
    gpus_before = serializers.IntegerField()
    gpus_after = serializers.IntegerField()
    cost_before = serializers.FloatField(help_text="$/h")
    cost_after = serializers.FloatField(help_text="$/h")
    cost_change = serializers.FloatField(help_text="$/h")


class WhatIfUnservedSerializer(serializers.Serializer[Any]):
    demand = serializers.CharField()
    tenant = serializers.CharField()
    before = serializers.FloatField(help_text="requests/s unserved before")
    after = serializers.FloatField(help_text="requests/s unserved after")
    reason = serializers.CharField(help_text="The planner's reason; empty when it gave none.")


class WhatIfChangeSerializer(serializers.Serializer[Any]):
    tenant = serializers.CharField()
    residency_regions = serializers.ListField(child=serializers.CharField(), allow_null=True)
    tier = serializers.CharField(allow_null=True)
    traffic_factor = serializers.FloatField()
    prompt_tokens_delta = serializers.FloatField()
    spill_allowed = serializers.BooleanField(allow_null=True, default=None)
    max_spill_rtt_ms = serializers.FloatField(allow_null=True, default=None)


class WhatIfResultSerializer(serializers.Serializer[Any]):
    """The preview: per region before and after, the $/h change, demand newly unserved."""

    change = WhatIfChangeSerializer()
    baseline = serializers.CharField(help_text="What the change is compared with.")
    baseline_status = serializers.CharField()
    status = serializers.CharField(help_text="The solver's status for the changed problem.")
    gap = serializers.FloatField(allow_null=True)
    cost_before = serializers.FloatField(help_text="$/h")
    cost_after = serializers.FloatField(help_text="$/h")
    cost_change = serializers.FloatField(help_text="$/h")
    regions = WhatIfRegionSerializer(many=True)
    newly_unserved = WhatIfUnservedSerializer(many=True)
    unserved_before = serializers.FloatField(help_text="requests/s")
    unserved_after = serializers.FloatField(help_text="requests/s")
    demands = serializers.ListField(child=serializers.CharField())
    warnings = serializers.ListField(child=serializers.CharField())


class WhatIfJobSerializer(serializers.ModelSerializer[WhatIfJob]):
    """A what-if job: ``queued`` (``queue_position`` jobs ahead), ``running``, then
    ``succeeded`` with ``result`` or ``failed`` with ``error``."""

    requested_by = read_only_by("username")
    change = WhatIfChangeSerializer(read_only=True)
    result = WhatIfResultSerializer(read_only=True, allow_null=True)
    queue_position = serializers.SerializerMethodField()

    class Meta:
        model = WhatIfJob
        fields = (
            "id",
            "status",
            "tenant",
            "change",
            "requested_by",
            "created_at",
            "started_at",
            "finished_at",
            "queue_position",
            "error",
            "result",
        )
        read_only_fields = fields

    def get_queue_position(self, job: WhatIfJob) -> int | None:
        """Queued jobs ahead of this one; null unless it is queued."""
        return queue_position(job)


class WhatIfViewSet(QueryGuardMixin, TenantScopeMixin, viewsets.GenericViewSet[WhatIfJob]):
    """Ask for a what-if preview and follow it."""

    permission_classes = [RolePermission]
    read_roles = frozenset(ROLES)
    # Any role may ask for a preview: it stores nothing but its job row.
    write_roles = frozenset(ROLES)
    parser_classes = [StrictJSONParser]
    serializer_class = WhatIfJobSerializer
    lookup_value_regex = ID_PATTERN
    pagination_class = None
    filter_backends: list[Any] = []

    def get_queryset(self) -> QuerySet[WhatIfJob]:
        return WhatIfJob.objects.select_related("requested_by")

    @extend_schema(
        summary="Follow a what-if preview",
        description=(
            "The job as it stands: poll until `status` is `succeeded` (`result` holds the "
            "preview) or `failed` (`error` says why). Readable by whoever asked for it and by "
            "policy admins."
        ),
        responses={200: WhatIfJobSerializer},
    )
    def retrieve(self, request: Request, pk: str) -> Response:
        job = whatif_job_for(user=request.user, job_id=int(pk))
        if job is None:
            raise exceptions.NotFound("No what-if of yours has this id.")
        return Response(WhatIfJobSerializer(job).data)

    @extend_schema(
        summary="Ask for a what-if preview",
        description=(
            "Checks the change (400 naming the field) and queues its preview; answers 202 with "
            "the job, to follow at `Location` (`/api/plans/what-ifs/{id}/`). The preview "
            "re-solves the placement off the web worker and stores nothing but the job. At most "
            "`HEADROOM_WHATIF_PER_USER` unfinished what-ifs per user and "
            "`HEADROOM_WHATIF_VIEWER_PER_HOUR` an hour for a viewer (429), at most "
            "`HEADROOM_WHATIF_QUEUE` unfinished in total (503); each with `Retry-After`."
        ),
        request=WhatIfRequestSerializer,
        responses={
            202: WhatIfJobSerializer,
            429: OpenApiResponse(
                description="This user has too many what-ifs unfinished, or a viewer asked for "
                "too many this hour: see Retry-After."
            ),
            503: OpenApiResponse(
                description="The what-if queue is full, or the database or the broker is "
                "unreachable: see Retry-After."
            ),
        },
    )
    def create(self, request: Request) -> Response:
        body = WhatIfRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            job = submit(change=body.change(), user=request.user)
        except WhatIfRefused as exc:
            if exc.busy:
                raise WhatIfBusy(exc.message, exc.retry_after_s) from exc
            raise exceptions.Throttled(wait=exc.retry_after_s, detail=exc.message) from exc
        # As it stands now (solved already where the task runs in this process).
        location = reverse("plan-what-if-detail", kwargs={"pk": job.pk})
        return Response(
            WhatIfJobSerializer(job).data,
            status=status.HTTP_202_ACCEPTED,
            headers={"Location": location},
        )
