"""What the active plan assumed of each pool's engines, and the pool signal alerts that check it.

The plan sized each pool (a model in a region) on its shapes' capacity figures, as its
problem holds them (``Plan.problem``: the figures it was solved with, not today's):

- **inter-token latency**: a replica decoding its figure's full batch gives each sequence
  ``decode_tokens_per_s / max_concurrency`` tokens a second, so the figure's ITL is
  ``max_concurrency / decode_tokens_per_s`` seconds (12 sequences at 160 tokens/s: 75 ms).
  Engines measured slower than that at p95 decode slower than the plan assumed, at any
  batch. With several shapes in the pool the slowest figure is the reference, so an alert
  holds against each of them;
- **KV-cache capacity**: ``max_concurrency`` sequences, each holding the mean prompt and
  output tokens of the demands the plan routes to the shape, must fit in one replica's KV
  cache (12 × 2,000 = 24,000 tokens). Engines that hold fewer tokens cannot run the figure's
  concurrency, which the plan's concurrency check counts on; with several shapes the need is
  their replica-weighted mean, as the measured capacity is the engines' mean.

``pool_signal_alerts_check`` measures every pool after a derivation
(``telemetry.pool_signals``) and checks it against these; the pipeline calls it next to the
drift pricing.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import transaction

from controlplane.fleet.models import LlmModel, Region, ReplicaShape
from controlplane.plans import selectors
from controlplane.plans.models import Plan
from controlplane.plans.selectors import plan_problem_or_error
from controlplane.telemetry.conf import telemetry_settings
from controlplane.telemetry.models import PoolSignalAlert, ProfileDerivation, RunStatus
from controlplane.telemetry.pool_signals import (
    SignalReference,
    pool_signal_check,
    pool_signals_measure,
)
from controlplane.telemetry.selectors import stored_bucket_s as telemetry_stored_bucket_s


@dataclass(frozen=True)
class ShapeAssumption:
    """One shape the plan runs in a pool: its replicas, its figure (as solved) and the mean
    context (prompt + output tokens) of the demands routed to it (None: none routed)."""

    shape: str
    replicas: int
    decode_tokens_per_s: float
    max_concurrency: float
    context_tokens: float | None

    @property
    def itl_s(self) -> float:
        """Seconds per output token with the figure's full batch decoding."""
        return self.max_concurrency / self.decode_tokens_per_s

    @property
    def kv_tokens_needed(self) -> float | None:
        if self.context_tokens is None:
            return None
        return self.max_concurrency * self.context_tokens

    def as_dict(self) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "replicas": self.replicas,
            "decode_tokens_per_s": self.decode_tokens_per_s,
            "max_concurrency": self.max_concurrency,
            "context_tokens": None
            if self.context_tokens is None
            else round(self.context_tokens, 1),
            "itl_s": round(self.itl_s, 6),
        }


def pool_assumptions(*, plan: Plan) -> dict[tuple[str, str], list[ShapeAssumption]]:
    """The shapes ``plan`` runs in each pool, by (model, region) names; shapes whose figure
    states no concurrency (nothing assumed of latency or KV) are left out."""
    problem, _ = plan_problem_or_error(plan)
    shapes = {s.name: s for s in problem.shapes} if problem else {}
    demands = {d.id: d for d in problem.demands} if problem else {}
    replicas: dict[tuple[str, str], int] = defaultdict(int)
    for row in plan.allocations.all():
        replicas[(row.region, row.shape)] += row.replicas
    context: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for route in plan.routing.all():
        demand = demands.get(route.demand)
        if demand is None or route.requests_per_s <= 0:
            continue
        tokens = demand.prompt_tokens + demand.output_tokens
        context[(route.region, route.shape)].append((route.requests_per_s, tokens))
    out: dict[tuple[str, str], list[ShapeAssumption]] = defaultdict(list)
    for (region, name), count in sorted(replicas.items()):
        shape = shapes.get(name)
        if count <= 0 or shape is None or not shape.max_concurrency:
            continue
        routed = context.get((region, name), [])
        rate = math.fsum(r for r, _ in routed)
        out[(shape.model, region)].append(
            ShapeAssumption(
                shape=name,
                replicas=count,
                decode_tokens_per_s=shape.decode_tokens_per_s,
                max_concurrency=shape.max_concurrency,
                context_tokens=math.fsum(r * t for r, t in routed) / rate if rate > 0 else None,
            )
        )
    return dict(out)


def signal_references(
    *, plan: Plan, shapes: list[ShapeAssumption], shape_ids: dict[str, int]
) -> dict[str, SignalReference | None]:
    """A pool's references by alert kind (see the module docstring), read from ``shapes``."""
    if not shapes:
        return {}
    rows = [s.as_dict() for s in shapes]
    one = shape_ids.get(shapes[0].shape) if len(shapes) == 1 else None
    slowest = max(shapes, key=lambda s: s.itl_s)
    refs: dict[str, SignalReference | None] = {
        PoolSignalAlert.Kind.ITL_P95: SignalReference(
            value=slowest.itl_s,
            shape_id=one,
            figures={"plan": plan.version, "shapes": [slowest.as_dict()]},
        )
    }
    sized = [s for s in shapes if s.kv_tokens_needed is not None]
    total = sum(s.replicas for s in sized)
    if sized and total:
        need = math.fsum(s.replicas * (s.kv_tokens_needed or 0.0) for s in sized) / total
        conc = math.fsum(s.replicas * s.max_concurrency for s in sized) / total
        refs[PoolSignalAlert.Kind.KV_CAPACITY] = SignalReference(
            value=need,
            shape_id=one,
            figures={
                "plan": plan.version,
                "shapes": rows,
                "max_concurrency": round(conc, 2),
                "context_tokens": round(need / conc, 1),
            },
        )
    else:
        refs[PoolSignalAlert.Kind.KV_CAPACITY] = None
    return refs


def pool_signal_alerts_check(*, derivation: ProfileDerivation) -> list[PoolSignalAlert]:
    """Measure every pool's signals over the last ``HEADROOM_TELEMETRY_POOL_SIGNAL_WINDOW_S``
    of ``derivation``'s window (at most the whole window) and check them against what the
    active plan assumed; returns the alerts raised, updated or resolved.

    Nothing for a derivation that did not succeed. Without an active plan only the queue
    time is checked (it needs no figure); a pool the active plan does not run has its
    latency and KV alerts resolved, and label values no model or region has are skipped.
    """
    if derivation.status != RunStatus.SUCCEEDED:
        return []
    conf = telemetry_settings()
    end = derivation.window_end
    start = max(derivation.window_start, end - timedelta(seconds=conf.signals.window_s))
    measured = pool_signals_measure(
        bucket_s=telemetry_stored_bucket_s(),
        start=start,
        end=end,
        min_observations=conf.min_requests,
    )
    if not measured:
        return []
    plan = selectors.plan_active()
    assumed = pool_assumptions(plan=plan) if plan is not None else {}
    shape_ids = dict(ReplicaShape.objects.values_list("name", "pk"))
    models = {m.name: m for m in LlmModel.objects.filter(name__in={k[0] for k in measured})}
    regions = {r.name: r for r in Region.objects.filter(name__in={k[1] for k in measured})}
    now = end  # as the tenant alerts: seen at the end of the window measured
    touched: list[PoolSignalAlert] = []
    with transaction.atomic():
        for (model_name, region_name), signals in measured.items():
            model, region = models.get(model_name), regions.get(region_name)
            if model is None or region is None:
                continue
            references = (
                signal_references(
                    plan=plan,
                    shapes=assumed.get((model_name, region_name), []),
                    shape_ids=shape_ids,
                )
                if plan is not None
                else {}
            )
            touched += pool_signal_check(
                model=model,
                region=region,
                measured=signals,
                references=references,
                thresholds=conf.signals,
                now=now,
                derivation=derivation,
            )
    return touched
