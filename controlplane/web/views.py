"""The operators' pages. Each view checks the role, calls one selector or service and renders
a template; decisions (approving a plan, saving a what-if) are the services' (``plans``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponsePermanentRedirect,
    HttpResponseRedirect,
)
from django.shortcuts import render
from django.templatetags.static import static
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from controlplane.core.roles import POLICY_ADMIN, ROLES, user_roles
from controlplane.plans import services as plan_services
from controlplane.plans.models import Plan
from controlplane.plans.whatif import whatif_apply, whatif_preview
from controlplane.policies.forms import tier_label
from controlplane.telemetry.histograms import COARSE_RELATIVE_WIDTH
from controlplane.telemetry.models import DriftAlert
from controlplane.web import charts, selectors
from controlplane.web.forms import PlanDecisionForm, WhatIfForm

View = Callable[..., HttpResponse]


def role_required(*roles: str) -> Callable[[View], View]:
    """Anonymous users go to the login page; users without one of ``roles`` get 403."""
    allowed = set(roles or ROLES)

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not (user_roles(request.user) & allowed):
                raise PermissionDenied("Your account has no Headroom role for this page.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


def _is_policy_admin(request: HttpRequest) -> bool:
    return POLICY_ADMIN in user_roles(request.user)


def _errors(exc: ValidationError) -> list[str]:
    if hasattr(exc, "error_dict"):
        return [
            f"{'' if field == '__all__' else field.replace('_', ' ') + ': '}{message}"
            for field, errors in exc.message_dict.items()
            for message in errors
        ]
    return list(exc.messages)


def favicon(request: HttpRequest) -> HttpResponse:
    """``/favicon.ico``, which browsers ask for on every page: Headroom's icon. The address
    is looked up per request (in production it carries the collected file's hash)."""
    return HttpResponsePermanentRedirect(static("web/favicon.svg"))


@role_required()
def fleet(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "web/fleet.html",
        {"page": selectors.fleet_overview(), "nav": "fleet"},
    )


@role_required()
def plan_list(request: HttpRequest) -> HttpResponse:
    page = Paginator(selectors.plan_list(), 50).get_page(request.GET.get("page"))
    return render(request, "web/plans.html", {"plans": page, "nav": "plans"})


def _plan_or_404(version: int) -> Plan:
    plan = selectors.plan_for_page(version)
    if plan is None:
        raise Http404(f"No plan v{version}.")
    return plan


@role_required()
def plan_detail(request: HttpRequest, version: int) -> HttpResponse:
    page = selectors.plan_page(_plan_or_404(version))
    return render(
        request,
        "web/plan.html",
        {"page": page, "can_decide": _is_policy_admin(request) and page.decidable, "nav": "plans"},
    )


@role_required()
def plan_active(request: HttpRequest) -> HttpResponse:
    version = Plan.objects.filter(state=Plan.State.ACTIVE).values_list("version", flat=True)
    if not version:
        messages.info(request, "No plan is active yet.")
        return HttpResponseRedirect(reverse("web:plans"))
    return HttpResponseRedirect(reverse("web:plan", args=[version[0]]))


@role_required(POLICY_ADMIN)
@require_http_methods(["GET", "POST"])
def plan_decide(request: HttpRequest, version: int) -> HttpResponse:
    """The confirmation step: the plan's changes again, a required reason, then the decision
    by ``plan_approve`` or ``plan_reject``."""
    plan = _plan_or_404(version)
    action = request.POST.get("action") or request.GET.get("action") or "approve"
    if action not in ("approve", "reject"):
        raise Http404("No such decision.")
    form = PlanDecisionForm(
        request.POST if "reason" in request.POST else None, initial={"action": action}
    )
    if form.is_bound and form.is_valid():
        decide = (
            plan_services.plan_approve
            if form.cleaned_data["action"] == "approve"
            else plan_services.plan_reject
        )
        try:
            decided = decide(plan=plan, user=request.user, reason=form.cleaned_data["reason"])
        except ValidationError as exc:
            for text in _errors(exc):
                form.add_error(None, text)
        else:
            verb = "approved: it is the active plan" if decided.state == "active" else "rejected"
            messages.success(request, f"Plan v{decided.version} {verb}.")
            return HttpResponseRedirect(reverse("web:plan", args=[decided.version]))
    return render(
        request,
        "web/plan_decide.html",
        {"plan": plan, "form": form, "action": action, "nav": "plans"},
    )


@role_required()
def tenant_list(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()
    tenants = selectors.tenant_list()
    if query:
        tenants = tenants.filter(name__icontains=query)
    page = Paginator(tenants, 100).get_page(request.GET.get("page"))
    return render(request, "web/tenants.html", {"tenants": page, "q": query, "nav": "tenants"})


def _tenant_charts(page: selectors.TenantPage) -> list[dict[str, Any]]:
    points = page.points
    keys = sorted({(p.model, p.region, p.workload_class) for p in points})

    def series(
        label: str, pick: Callable[[selectors.ProfilePoint], float | None]
    ) -> list[charts.Series]:
        out = []
        for key in keys:
            rows = [
                (p.at, value)
                for p in points
                if (p.model, p.region, p.workload_class) == key and (value := pick(p)) is not None
            ]
            name = label if len(keys) == 1 else f"{label} {key[0]}@{key[1]}"
            out.append(charts.Series(name, rows))
        return out

    specs: list[tuple[str, str, str, list[charts.Series]]] = [
        (
            "rate",
            "Request rate",
            "requests/s",
            series("peak", lambda p: p.peak_requests_per_s)
            + series("mean", lambda p: p.mean_requests_per_s),
        ),
        (
            "prompt",
            "Prompt tokens",
            "tokens per request",
            series("p50", lambda p: p.prompt_p50)
            + series("p95", lambda p: p.prompt_p95)
            + series("p99", lambda p: p.prompt_p99),
        ),
        (
            "output",
            "Output tokens",
            "tokens per request",
            series("p50", lambda p: p.output_p50)
            + series("p95", lambda p: p.output_p95)
            + series("p99", lambda p: p.output_p99),
        ),
        ("cache", "Prefix-cache hit rate", "share", series("hit rate", lambda p: p.cache_hit_rate)),
        ("ttft", "Time to first token, p95", "seconds", series("p95", lambda p: p.ttft_p95_s)),
    ]
    return [
        {"title": title, "svg": charts.line_chart(title=title, unit=unit, series=s, chart_id=key)}
        for key, title, unit, s in specs
    ]


@role_required()
def tenant_detail(request: HttpRequest, name: str) -> HttpResponse:
    tenant = selectors.tenant_for_page(name)
    if tenant is None:
        raise Http404(f"No tenant {name}.")
    page = selectors.tenant_page(tenant)
    return render(
        request,
        "web/tenant.html",
        {
            "page": page,
            "tier_text": tier_label(tenant.tier),
            "charts": _tenant_charts(page),
            "cost": selectors.tenant_cost(tenant),
            "is_policy_admin": _is_policy_admin(request),
            "coarse_width": COARSE_RELATIVE_WIDTH,
            "nav": "tenants",
        },
    )


@role_required()
@require_http_methods(["GET", "POST"])
def whatif(request: HttpRequest) -> HttpResponse:
    """GET: the form. POST ``preview``: re-solve with the change, store nothing. POST ``save``
    (policy-admin): apply the policy part through the admin's service."""
    can_save = _is_policy_admin(request)
    result = None
    errors: list[str] = []
    if request.method == "POST":
        form = WhatIfForm(request.POST)
        wants_save = request.POST.get("do") == "save"
        if wants_save and not can_save:
            raise PermissionDenied("Only a policy admin may save a what-if.")
        if form.is_valid():
            change = form.change()
            try:
                if wants_save:
                    tenant = whatif_apply(change=change, user=request.user)
                    messages.success(
                        request,
                        f"Saved {tenant.name}'s policy (revision {tenant.revision}); the next "
                        "re-plan plans for it.",
                    )
                    return HttpResponseRedirect(reverse("web:tenant", args=[tenant.name]))
                result = whatif_preview(change=change)
            except ValidationError as exc:
                errors = _errors(exc)
    else:
        initial: dict[str, Any] = {"traffic_factor": 1.0, "prompt_tokens_delta": 0.0}
        name = request.GET.get("tenant")
        chosen = selectors.tenant_for_page(name) if name else None
        if chosen is not None:
            initial["tenant"] = chosen.name
            initial["residency_regions"] = [r.name for r in chosen.residency_regions.all()]
        form = WhatIfForm(initial=initial)
    return render(
        request,
        "web/whatif.html",
        {
            "form": form,
            "result": result,
            "errors": errors,
            "can_save": can_save,
            "nav": "whatif",
        },
    )


@role_required()
def drift_alerts(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status", DriftAlert.Status.OPEN)
    if status not in {*DriftAlert.Status.values, "all"}:
        status = DriftAlert.Status.OPEN
    rows = selectors.drift_alert_rows(status=None if status == "all" else status)
    return render(
        request,
        "web/drift.html",
        {
            "rows": rows,
            "status": status,
            "statuses": [*DriftAlert.Status.choices, ("all", "all")],
            "nav": "drift",
        },
    )


@role_required()
def finance_overview(request: HttpRequest) -> HttpResponse:
    page = selectors.finance_page()
    figures = []
    if page.totals:
        figures = [
            {
                "title": "Cost per month, all regions",
                "svg": charts.line_chart(
                    title="Cost per month, all regions",
                    unit="$ per month",
                    chart_id="finance-total",
                    series=[
                        charts.Series("planned", [(t, c) for t, c, _, _ in page.totals]),
                        charts.Series("band low", [(t, lo) for t, _, lo, _ in page.totals]),
                        charts.Series("band high", [(t, hi) for t, _, _, hi in page.totals]),
                    ],
                ),
            },
            {
                "title": "Cost per month by GPU type",
                "svg": charts.line_chart(
                    title="Cost per month by GPU type",
                    unit="$ per month",
                    chart_id="finance-gpu",
                    series=[charts.Series(a, p) for a, p in page.by_accelerator.items()],
                ),
            },
        ]
    return render(request, "web/finance.html", {"page": page, "charts": figures, "nav": "finance"})
