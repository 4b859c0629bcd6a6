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
    JsonResponse,
)
from django.shortcuts import render
from django.templatetags.static import static
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from controlplane.core.roles import POLICY_ADMIN, ROLES, user_roles
from controlplane.emission.selectors import shadow_overview
from controlplane.plans import services as plan_services
from controlplane.plans.models import Plan, WhatIfJob
from controlplane.plans.whatif import change_from_dict, result_from_dict, whatif_apply
from controlplane.plans.whatif_jobs import (
    WhatIfRefused,
    queue_position,
    whatif_job_for,
    whatif_submit,
)
from controlplane.policies.forms import tier_label
from controlplane.policies.models import Tenant
from controlplane.telemetry.histograms import COARSE_RELATIVE_WIDTH
from controlplane.telemetry.models import DriftAlert
from controlplane.web import attainment, charts, policy_drift, selectors
from controlplane.web.forms import PlanDecisionForm, WhatIfForm
from controlplane.web.plan_states import plan_banner, plan_sizing

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
    page = selectors.fleet_overview()
    slo = attainment.slo_attainment(active=page.active)
    return render(
        request,
        "web/fleet.html",
        {
            "page": page,
            "slo": slo,
            "slo_breaches": [a for a in slo if a.breach],
            "policy_notices": policy_drift.policy_notices(active=page.active),
            "shadow": shadow_overview(),
            "nav": "fleet",
        },
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
        {
            "page": page,
            "sizing": plan_sizing(page.plan),
            "can_decide": _is_policy_admin(request) and page.decidable,
            "nav": "plans",
        },
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
        {
            "plan": plan,
            "banner": plan_banner(plan),
            "form": form,
            "action": action,
            "nav": "plans",
        },
    )


@role_required()
def tenant_list(request: HttpRequest) -> HttpResponse:
    query = request.GET.get("q", "").strip()
    tenants = selectors.tenant_list()
    if query:
        tenants = tenants.filter(name__icontains=query)
    page = Paginator(tenants, 100).get_page(request.GET.get("page"))
    return render(request, "web/tenants.html", {"tenants": page, "q": query, "nav": "tenants"})


def ttft_objective(tenant: Tenant) -> charts.Threshold:
    """The tenant tier's p95 TTFT objective as a chart line ("SLO 2.5 s")."""
    objective = tenant.tier.p95_ttft_slo_s
    return charts.Threshold(objective, f"SLO {charts.number_label(objective)} s")


def _tenant_charts(page: selectors.TenantPage) -> list[dict[str, Any]]:
    points = page.points
    keys = sorted({(p.model, p.region, p.workload_class) for p in points})

    def series(
        label: str, pick: Callable[[selectors.ProfilePoint], float | None]
    ) -> list[charts.Series]:
        out = []
        for key in keys:
            mine = [p for p in points if (p.model, p.region, p.workload_class) == key]
            rows = [(p.at, value) for p in mine if (value := pick(p)) is not None]
            spans = sorted(p.span for p in mine if p.span is not None)
            name = label if len(keys) == 1 else f"{label} {key[0]}@{key[1]}"
            out.append(
                charts.Series(
                    name,
                    rows,
                    # A profile version holds until the next: steps. Observation windows are
                    # joined only where they are about one window apart.
                    step=not spans,
                    max_gap=spans[len(spans) // 2] * charts.GAP_FACTOR if spans else None,
                )
            )
        return out

    specs: list[tuple[str, str, str, list[charts.Series], charts.Threshold | None]] = [
        (
            "rate",
            "Request rate",
            "requests/s",
            series("peak", lambda p: p.peak_requests_per_s)
            + series("mean", lambda p: p.mean_requests_per_s),
            None,
        ),
        (
            "prompt",
            "Prompt tokens",
            "tokens per request",
            series("p50", lambda p: p.prompt_p50)
            + series("p95", lambda p: p.prompt_p95)
            + series("p99", lambda p: p.prompt_p99),
            None,
        ),
        (
            "output",
            "Output tokens",
            "tokens per request",
            series("p50", lambda p: p.output_p50)
            + series("p95", lambda p: p.output_p95)
            + series("p99", lambda p: p.output_p99),
            None,
        ),
        (
            "cache",
            "Prefix-cache hit rate",
            "share",
            series("hit rate", lambda p: p.cache_hit_rate),
            None,
        ),
        (
            "ttft",
            "Time to first token, p95",
            "seconds",
            series("p95", lambda p: p.ttft_p95_s),
            ttft_objective(page.tenant),
        ),
    ]
    return [
        {
            "title": title,
            "svg": charts.line_chart(
                title=title, unit=unit, series=s, chart_id=key, threshold=threshold
            ),
        }
        for key, title, unit, s, threshold in specs
    ]


@role_required()
def tenant_detail(request: HttpRequest, name: str) -> HttpResponse:
    tenant = selectors.tenant_for_page(name)
    if tenant is None:
        raise Http404(f"No tenant {name}.")
    page = selectors.tenant_page(tenant)
    slo = attainment.tenant_attainment(active=page.active, tenant=tenant)
    objective = ttft_objective(tenant)
    return render(
        request,
        "web/tenant.html",
        {
            "page": page,
            "tier_text": tier_label(tenant.tier),
            "charts": _tenant_charts(page),
            "cost": selectors.tenant_cost(tenant),
            "slo": slo,
            "slo_rows": [slo] if slo is not None else [],
            "policy_notices": policy_drift.policy_notices(active=page.active, tenant=tenant),
            "is_policy_admin": _is_policy_admin(request),
            "coarse_width": COARSE_RELATIVE_WIDTH,
            "ttft_objective": objective,
            "ttft_breaches": sum(
                1
                for p in page.points
                if p.ttft_p95_s is not None and p.ttft_p95_s > objective.value
            ),
            "nav": "tenants",
        },
    )


def _whatif_initial(job: WhatIfJob) -> dict[str, Any]:
    """The form's fields for the change ``job`` previews."""
    change = change_from_dict(job.change)
    initial: dict[str, Any] = {
        "tenant": change.tenant,
        "traffic_factor": change.traffic_factor,
        "prompt_tokens_delta": change.prompt_tokens_delta,
    }
    if change.residency_regions is not None:
        initial["change_residency"] = True
        initial["residency_regions"] = list(change.residency_regions)
    else:
        chosen = selectors.tenant_for_page(change.tenant)
        if chosen is not None:
            initial["residency_regions"] = [r.name for r in chosen.residency_regions.all()]
    if change.tier is not None:
        initial["tier"] = change.tier
    if change.spill_allowed is not None:
        initial["spill_allowed"] = "allow" if change.spill_allowed else "forbid"
    if change.max_spill_rtt_ms is not None:
        initial["max_spill_rtt_ms"] = change.max_spill_rtt_ms
    return initial


def _whatif_progress(job: WhatIfJob) -> dict[str, Any]:
    """What the page says while ``job`` waits or runs, and whether it has finished."""
    ahead = queue_position(job)
    if job.status == WhatIfJob.Status.QUEUED:
        text = (
            "Queued: next to be solved."
            if not ahead
            else f"Queued: {ahead} what-if{'s' if ahead != 1 else ''} ahead of this one."
        )
    elif job.status == WhatIfJob.Status.RUNNING:
        text = "Re-solving the placement…"
    elif job.status == WhatIfJob.Status.SUCCEEDED:
        text = "Solved."
    else:
        text = f"Failed: {job.error}"
    return {
        "id": job.pk,
        "status": job.status,
        "done": not job.is_active,
        "queue_position": ahead,
        "message": text,
    }


@role_required()
@require_http_methods(["GET", "POST"])
def whatif(request: HttpRequest) -> HttpResponse:
    """GET: the form, or with ``?job=`` the form for that what-if with its progress or its
    preview. POST ``preview``: check the change and queue its preview (solved off the web
    worker), then show it at ``?job=``. POST ``save`` (policy-admin): apply the policy part
    through the admin's service."""
    can_save = _is_policy_admin(request)
    result = None
    job = None
    errors: list[str] = []
    status = 200
    headers: dict[str, str] = {}
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
                job = whatif_submit(change=change, user=request.user)
                return HttpResponseRedirect(f"{reverse('web:whatif')}?job={job.pk}", status=303)
            except ValidationError as exc:
                errors = _errors(exc)
            except WhatIfRefused as exc:
                errors = [exc.message]
                status = 503 if exc.busy else 429
                headers["Retry-After"] = str(exc.retry_after_s)
    elif request.GET.get("job"):
        raw = request.GET["job"]
        # Ids are bigints: more digits cannot name a row.
        usable = raw.isascii() and raw.isdigit() and len(raw) <= 18
        found = whatif_job_for(user=request.user, job_id=int(raw)) if usable else None
        if found is None:
            raise Http404("No what-if of yours has this number.")
        job = found
        if job.status == WhatIfJob.Status.SUCCEEDED and job.result is not None:
            result = result_from_dict(job.result)
        elif job.status == WhatIfJob.Status.FAILED:
            errors = [job.error]
        form = WhatIfForm(initial=_whatif_initial(job))
    else:
        initial: dict[str, Any] = {"traffic_factor": 1.0, "prompt_tokens_delta": 0.0}
        name = request.GET.get("tenant")
        chosen = selectors.tenant_for_page(name) if name else None
        if chosen is not None:
            initial["tenant"] = chosen.name
            initial["residency_regions"] = [r.name for r in chosen.residency_regions.all()]
        form = WhatIfForm(initial=initial)
    response = render(
        request,
        "web/whatif.html",
        {
            "form": form,
            "result": result,
            "job": job,
            "progress": _whatif_progress(job) if job is not None else None,
            "errors": errors,
            "can_save": can_save,
            "nav": "whatif",
        },
        status=status,
    )
    for name, value in headers.items():
        response[name] = value
    return response


@role_required()
@require_http_methods(["GET"])
def whatif_job(request: HttpRequest, job_id: str) -> JsonResponse:
    """A what-if's progress for the page's poll: status, queue position, a sentence, done."""
    job = whatif_job_for(user=request.user, job_id=int(job_id))
    if job is None:
        raise Http404("No what-if of yours has this number.")
    return JsonResponse(_whatif_progress(job))


@role_required()
def drift_alerts(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status", DriftAlert.Status.OPEN)
    if status not in {*DriftAlert.Status.values, "all"}:
        status = DriftAlert.Status.OPEN
    page = selectors.drift_page(status=None if status == "all" else status)
    return render(
        request,
        "web/drift.html",
        {
            "page": page,
            "status": status,
            "statuses": [*DriftAlert.Status.choices, ("all", "all")],
            "nav": "drift",
        },
    )


@role_required()
def finance_overview(request: HttpRequest) -> HttpResponse:
    choices = {
        "group_choices": selectors.FINANCE_GROUP_CHOICES,
        "period_choices": selectors.FINANCE_PERIOD_CHOICES,
        "nav": "finance",
    }
    try:
        group_by, period = selectors.finance_query(request.GET)
    except selectors.FinanceQueryError as exc:
        page = selectors.FinancePage(f"{exc.field}: {exc.message}.", None, [], {}, [])
        return render(
            request, "web/finance.html", {"page": page, "charts": [], **choices}, status=400
        )
    page = selectors.finance_page(group_by=group_by, period=period)
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
    return render(request, "web/finance.html", {"page": page, "charts": figures, **choices})
