"""The API kit: pagination, stable ordering, the id pattern in URLs, and the base of every
read-only endpoint.

Every endpoint, read-only or not, refuses NUL in query parameters (PostgreSQL text cannot
hold it: it would be a database error, a 500), orders its pages with a tie-break on the id
(rows that compare equal would otherwise move between pages) and caps a page at
``RecordPagination.max_limit`` rows.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django_filters.rest_framework import DjangoFilterBackend
from rest_framework import exceptions, viewsets
from rest_framework.filters import OrderingFilter
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import FormParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.views import APIView

from controlplane.core.parsers import StrictJSONParser
from controlplane.core.roles import POLICY_ADMIN, ROLES, RolePermission

# Ids are bigints: more digits than this cannot name a row, and would overflow the database's
# integer type in the lookup, so such URLs do not resolve (404).
ID_PATTERN = "[0-9]{1,18}"


class RecordPagination(LimitOffsetPagination):
    """``?limit=&offset=``; the page size is ``PAGE_SIZE`` unless ``limit`` asks otherwise."""

    # Bounds one response (and keeps LIMIT inside the database's integer range).
    max_limit = 1000


class StableOrderingFilter(OrderingFilter):
    """``?ordering=a,-b`` over the view's ``ordering_fields``, ties broken by id.

    Without the tie-break, rows that compare equal (two figures measured at the same time)
    could move between pages from one request to the next.
    """

    def get_ordering(self, request: Request, queryset: QuerySet[Any], view: Any) -> list[Any]:
        requested = super().get_ordering(request, queryset, view)
        ordering: list[Any] = list(
            requested or queryset.query.order_by or queryset.model._meta.ordering
        )
        if not {"pk", "-pk", "id", "-id"} & set(ordering):
            ordering.append("pk")
        return ordering


class QueryGuardMixin(APIView):
    """Refuses NUL in query parameters as a 400 naming the parameter."""

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        for key, values in request.query_params.lists():
            if "\x00" in key or any("\x00" in value for value in values):
                raise exceptions.ValidationError(
                    {key.replace("\x00", ""): ["Query parameters may not contain NUL."]}
                )


class ReadOnlyViewSet(QueryGuardMixin, viewsets.ReadOnlyModelViewSet[Any]):
    """List (filtered, stably ordered, paginated) and retrieve; any role reads.

    Subclasses set the queryset, serializer, ``filterset_*`` and ``ordering_fields``; an
    action that writes names its ``write_roles`` (``policy-admin`` by default)."""

    permission_classes = [RolePermission]
    read_roles = frozenset(ROLES)
    write_roles = frozenset({POLICY_ADMIN})
    parser_classes = [StrictJSONParser, FormParser, MultiPartParser]
    filter_backends = [DjangoFilterBackend, StableOrderingFilter]
    pagination_class = RecordPagination
    lookup_value_regex = ID_PATTERN
