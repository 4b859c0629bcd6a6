"""The API kit: pagination, stable ordering, the id pattern in URLs, and the base of every
read-only endpoint.

Every endpoint, read-only or not, refuses NUL in query parameters (PostgreSQL text cannot
hold it: it would be a database error, a 500), orders its pages with a tie-break on the id
(rows that compare equal would otherwise move between pages) and caps a page at
``RecordPagination.max_limit`` rows, and serves a tenant key only its own tenant's rows
(``TenantScopeMixin``, ``core.tenancy``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from django.contrib.auth.models import AnonymousUser
from django.db.models import Model, QuerySet
from rest_framework import exceptions, generics, viewsets
from rest_framework.filters import OrderingFilter
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.parsers import FormParser
from rest_framework.relations import ManyRelatedField, RelatedField
from rest_framework.request import Request
from rest_framework.serializers import BaseSerializer, ListSerializer
from rest_framework.settings import api_settings
from rest_framework.views import APIView

from controlplane.core.filters import StrictFilterBackend
from controlplane.core.parsers import StrictJSONParser, StrictMultiPartParser
from controlplane.core.roles import POLICY_ADMIN, ROLES, RolePermission
from controlplane.core.tenancy import TENANT_OWN, TenantPrincipal, request_principal

# Ids are bigints: more digits than this cannot name a row, and would overflow the database's
# integer type in the lookup, so such URLs do not resolve (404).
ID_PATTERN = "[0-9]{1,18}"


class RecordPagination(LimitOffsetPagination):
    """``?limit=&offset=``; the page size is ``PAGE_SIZE`` unless ``limit`` asks otherwise.

    Both are whole numbers in their bounds, or the request is a 400 naming the parameter
    (DRF alone would serve the default page for ``?limit=abc`` and clamp ``?limit=5000``).
    """

    # Bounds one response (and keeps LIMIT inside the database's integer range).
    max_limit = 1000
    # An offset past the end is an empty page. Past this it is a 400 like any out-of-range
    # value: every table's end lies before it, and LIMIT/OFFSET stay inside the database's
    # bigint.
    max_offset = 10**15

    def get_limit(self, request: Request) -> int | None:
        if self.limit_query_param not in request.query_params:
            return self.default_limit
        return _whole_parameter(request, self.limit_query_param, 1, self.max_limit)

    def get_offset(self, request: Request) -> int:
        if self.offset_query_param not in request.query_params:
            return 0
        return _whole_parameter(request, self.offset_query_param, 0, self.max_offset)

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        bounds: dict[str, dict[str, int]] = {
            self.limit_query_param: {"minimum": 1, "maximum": self.max_limit},
            self.offset_query_param: {"minimum": 0, "maximum": self.max_offset},
        }
        parameters: list[dict[str, Any]] = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            parameter["schema"] = {**parameter["schema"], **bounds[parameter["name"]]}
        return parameters


def _whole_parameter(request: Request, name: str, low: int, high: int | None) -> int:
    """The query parameter ``name`` as a whole number in ``[low, high]``, else a 400."""
    text = request.query_params[name].strip()
    wanted = f"A whole number from {low}" + (f" to {high}." if high is not None else " up.")
    # Digits only (no sign, no fraction); a thousand of them is past any use.
    if not (text.isascii() and text.isdigit()) or len(text) > 1000:
        raise exceptions.ValidationError({name: [wanted]})
    value = int(text)
    if value < low or (high is not None and value > high):
        raise exceptions.ValidationError({name: [wanted]})
    return value


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
    """Refuses NUL in query parameters, and a ``?format=`` no renderer of the view writes, as a
    400 naming the parameter (DRF alone answers an unknown format with 404 and ignores an
    empty one)."""

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        name = api_settings.URL_FORMAT_OVERRIDE
        if name and name in request.query_params:
            formats = [renderer.format for renderer in self.get_renderers()]
            if request.query_params[name] not in formats:
                raise exceptions.ValidationError({name: [f"One of: {', '.join(formats)}."]})
        super().initial(request, *args, **kwargs)
        for key, values in request.query_params.lists():
            if "\x00" in key or any("\x00" in value for value in values):
                raise exceptions.ValidationError(
                    {key.replace("\x00", ""): ["Query parameters may not contain NUL."]}
                )


class OperatorFieldsRefused(exceptions.PermissionDenied):
    """A tenant key's write that changes fields only the fleet's operators set: 403 with
    ``fields`` naming each one (the error contract adds them to the body)."""

    def __init__(self, fields: Iterable[str], message: str | None = None) -> None:
        names = sorted(fields)
        super().__init__(
            message
            or f"A tenant key cannot change {', '.join(names)}: the fleet's operators set "
            f"{'it' if len(names) == 1 else 'them'}."
        )
        self.fields = {
            name: ["Set by the fleet's operators: a tenant key cannot change it."] for name in names
        }


def _comparable(value: Any) -> Any:
    """A field's value as the check below compares it: records by id, lists as id sets."""
    if isinstance(value, Model):
        return value.pk
    if isinstance(value, list | tuple | set | frozenset | QuerySet):
        return frozenset(_comparable(item) for item in value)
    return value


def _stored(model: type[Model], instance: Model | None, name: str) -> Any:
    """What ``instance`` holds in field ``name`` (a new row: the field's default)."""
    field = model._meta.get_field(name)
    if instance is None:
        if getattr(field, "many_to_many", False):
            return frozenset()
        default = field.get_default() if hasattr(field, "get_default") else None
        return _comparable(default)
    if getattr(field, "many_to_many", False):
        return frozenset(getattr(instance, name).values_list("pk", flat=True))
    return getattr(instance, getattr(field, "attname", name))


class TenantScopeMixin(generics.GenericAPIView[Any]):
    """Rows a tenant key may see, and the tenant a key's writes may name.

    For a view with ``tenant_access = TENANT_OWN``, every queryset the view filters (lists,
    and ``get_object`` behind details, updates, deletes and detail actions) keeps the rows
    whose ``tenant_lookup`` (a path to the tenant's name, e.g. ``"tenant__name"``) is the
    key's tenant, so another tenant's row is a 404 as if it did not exist. The serializer's
    tenant field (the first step of ``tenant_lookup``, when it is a relation) accepts the
    key's own tenant only: naming another is a 400 on that field. Users see everything.

    What a key's write may change (``tenant_check_write``, called by the writing views): the
    fields named in ``tenant_fields``, the ones its tenant owns. Every other field is the
    operators' (tier, fair-share weight, quotas, residency, spill): sending it back unchanged
    is fine, changing it is a 403 naming it. ``tenant_owned_when`` marks the rows that are
    the tenant's own to write at all (a declared workload profile, not a measured one): a key
    neither makes nor changes nor deletes another kind of row (403 naming the field).
    """

    tenant_access: ClassVar[str | None] = None
    tenant_lookup: ClassVar[str | None] = None
    tenant_writes: ClassVar[frozenset[str]] = frozenset()
    tenant_fields: ClassVar[frozenset[str]] = frozenset()
    tenant_owned_when: ClassVar[Mapping[str, Any]] = {}

    @property
    def tenant_principal(self) -> TenantPrincipal | None:
        return request_principal(getattr(self, "request", None))

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if request_principal(request) is not None:
            # simple_history's middleware takes the acting user from the Django request, and a
            # key is no user row (storing it would fail): the history row's user stays empty
            # and its change reason names the key (``controlplane.access.audit``).
            request._request.user = AnonymousUser()

    def filter_queryset(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return self.tenant_scope(super().filter_queryset(queryset))

    def tenant_scope(self, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """The rows of ``queryset`` this request may see."""
        principal = self.tenant_principal
        if principal is None:
            return queryset
        if self.tenant_access != TENANT_OWN:
            # Fleet-wide records are readable as a whole; any other endpoint refused the key
            # already, and shows nothing should a path get this far.
            return queryset if self.tenant_access is not None else queryset.none()
        if self.tenant_lookup is None:
            return queryset.none()
        return queryset.filter(**{self.tenant_lookup: principal.tenant_name})

    def tenant_check_owned(self, instance: Model) -> None:
        """A key writes only rows its tenant owns (``tenant_owned_when``), else 403."""
        if self.tenant_principal is None:
            return
        for name, owned in self.tenant_owned_when.items():
            value = getattr(instance, name)
            if value != owned:
                kind = instance._meta.verbose_name
                raise OperatorFieldsRefused(
                    [name],
                    f"This {kind} has {name} {value!r}: a tenant key writes only the "
                    f"{kind}s its tenant owns ({name} {owned!r}).",
                )

    def tenant_check_write(self, serializer: BaseSerializer[Any]) -> None:
        """Refuse (403) a key's change to a field its tenant does not own; see the class."""
        if self.tenant_principal is None:
            return
        instance = serializer.instance
        if instance is not None:
            self.tenant_check_owned(instance)
        model: type[Model] = self.get_queryset().model
        refused = []
        data: Mapping[str, Any] = serializer.validated_data
        for name, value in data.items():
            if name in self.tenant_fields:
                continue
            if name in self.tenant_owned_when:
                if value != self.tenant_owned_when[name]:
                    refused.append(name)
            elif _comparable(value) != _stored(model, instance, name):
                refused.append(name)
        if refused:
            raise OperatorFieldsRefused(refused)

    def get_serializer(self, *args: Any, **kwargs: Any) -> BaseSerializer[Any]:
        serializer = super().get_serializer(*args, **kwargs)
        principal = self.tenant_principal
        if principal is not None and self.tenant_lookup:
            form = serializer.child if isinstance(serializer, ListSerializer) else serializer
            field = getattr(form, "fields", {}).get(self.tenant_lookup.split("__")[0])
            if isinstance(field, ManyRelatedField):
                field = field.child_relation
            if isinstance(field, RelatedField) and field.queryset is not None:
                field.queryset = field.queryset.filter(pk=principal.tenant_id)
        return serializer


class ReadOnlyViewSet(QueryGuardMixin, TenantScopeMixin, viewsets.ReadOnlyModelViewSet[Any]):
    """List (filtered, stably ordered, paginated) and retrieve; any role reads.

    Subclasses set the queryset, serializer, ``filterset_*`` and ``ordering_fields``; an
    action that writes names its ``write_roles`` (``policy-admin`` by default)."""

    permission_classes = [RolePermission]
    read_roles = frozenset(ROLES)
    write_roles = frozenset({POLICY_ADMIN})
    parser_classes = [StrictJSONParser, FormParser, StrictMultiPartParser]
    filter_backends = [StrictFilterBackend, StableOrderingFilter]
    pagination_class = RecordPagination
    lookup_value_regex = ID_PATTERN
