"""What-if previews as jobs: asked for in a request, solved off the web worker.

A preview re-solves the placement (0.3 to a few seconds, more on a large fleet). Solved in the
request it holds a web worker for that long, and a few at once stall every cheap read, so a
request only checks the change and queues a ``WhatIfJob`` row (``whatif_submit``); the page
and the API then poll the row (``whatif_job_for``) until it holds the result or the reason it
failed.

Where the solve runs: with a broker, a Celery worker (task ``headroom.plans.whatif``); without
one (the embedded default), a child process of the web server, started by a bounded pool
(``controlplane.core.isolated.ChildPool``) at a lower CPU priority (``HEADROOM_WHATIF_NICE``),
so the web workers keep their cores. Either way the task drains the queue: it claims the
oldest queued job while fewer than ``HEADROOM_WHATIF_WORKERS`` run, solves it, and claims the
next, so the bound holds across web processes and workers (the claim is one conditional
UPDATE that counts the running jobs). Submits are serialized with each other, so two at once
cannot both pass a bound.

Bounds (``whatif_settings``), each refused with a reason and ``Retry-After``:

- per user: at most ``HEADROOM_WHATIF_PER_USER`` (2) unfinished (queued or running) what-ifs;
  the next is refused (``WhatIfRefused``, the API's 429);
- in total: at most ``HEADROOM_WHATIF_WORKERS`` (1) solved at once, the rest wait in order;
  at most ``HEADROOM_WHATIF_QUEUE`` (32) unfinished; the next is refused (503, busy);
- a viewer (an account with neither the policy-admin nor the finance role) asks for at most
  ``HEADROOM_WHATIF_VIEWER_PER_HOUR`` (30) in any hour (429 until the oldest ages out).

Time limit: a preview gets ``HEADROOM_WHATIF_TIME_LIMIT_S`` (60); each solve gets what is left,
and a preview past it fails saying so. Where the solve runs in the main thread of a worker or
child process, an alarm stops it at the limit even inside a step. A job still running
``EXPIRY_GRACE_S`` past its limit (its process died or hung), or still queued after
``HEADROOM_WHATIF_QUEUE_TIMEOUT_S`` (600), is failed with the reason when next read or claimed.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Count, Q, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from controlplane.celery import app
from controlplane.core.conf import setting_int, setting_number
from controlplane.core.isolated import ChildPool
from controlplane.core.jobs import JobStatus
from controlplane.core.roles import FINANCE, POLICY_ADMIN, user_roles
from controlplane.core.tasks import job_send
from controlplane.plans.models import PlannerLock, WhatIfJob
from controlplane.plans.services import Actor
from controlplane.plans.whatif import (
    WhatIfChange,
    WhatIfTimeLimit,
    change_as_dict,
    change_from_dict,
    result_as_dict,
    whatif_preview,
    whatif_validate,
)

logger = logging.getLogger(__name__)

WHATIF_TASK = "headroom.plans.whatif"
# The row submits and claims serialize on (a PlannerLock row of its own: never the planner's).
SERIALIZE_ROW = "whatif-jobs"
# How long past its time limit a running job may go unreported before it is failed: its own
# check fails it at the limit; this catches a process that died or hung.
EXPIRY_GRACE_S = 30.0
RATE_WINDOW_S = 3600.0
ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)


@dataclass(frozen=True)
class WhatIfSettings:
    workers: int
    per_user: int
    queue: int
    viewer_per_hour: int
    time_limit_s: float
    queue_timeout_s: float
    nice: int


def whatif_settings() -> WhatIfSettings:
    """The what-if bounds, read at call time (``controlplane.core.conf``)."""
    return WhatIfSettings(
        workers=setting_int("HEADROOM_WHATIF_WORKERS", 1, positive=True),
        per_user=setting_int("HEADROOM_WHATIF_PER_USER", 2, positive=True),
        queue=setting_int("HEADROOM_WHATIF_QUEUE", 32, positive=True),
        viewer_per_hour=setting_int("HEADROOM_WHATIF_VIEWER_PER_HOUR", 30, positive=True),
        time_limit_s=setting_number("HEADROOM_WHATIF_TIME_LIMIT_S", 60.0, positive=True),
        queue_timeout_s=setting_number("HEADROOM_WHATIF_QUEUE_TIMEOUT_S", 600.0, positive=True),
        nice=setting_int("HEADROOM_WHATIF_NICE", 10, minimum=0, maximum=19),
    )


class WhatIfRefused(Exception):
    """A what-if refused by a bound: ``busy`` (the total queue is full) or not (this user's
    bound or rate); ``retry_after_s`` says when asking again may succeed."""

    def __init__(self, message: str, *, retry_after_s: float, busy: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after_s = max(1, math.ceil(retry_after_s))
        self.busy = busy


def rate_limited(user: Actor | None) -> bool:
    """Whether ``user``'s what-ifs count against the viewer rate (no policy-admin or finance
    role)."""
    return not (user_roles(user) & {POLICY_ADMIN, FINANCE})


def _serialized() -> None:
    """Inside a transaction: wait for every other submit to finish (a row lock;
    on SQLite, transactions already take the write lock when they begin)."""
    if not connection.features.has_select_for_update:
        return
    if PlannerLock.objects.select_for_update().filter(name=SERIALIZE_ROW).first() is None:
        PlannerLock.objects.get_or_create(name=SERIALIZE_ROW)
        PlannerLock.objects.select_for_update().filter(name=SERIALIZE_ROW).first()


def _deadline(job: WhatIfJob, conf: WhatIfSettings) -> datetime | None:
    """When an unfinished job is overdue: queued past the queue timeout, running past its
    time limit and the grace."""
    if job.status == JobStatus.QUEUED:
        return job.created_at + timedelta(seconds=conf.queue_timeout_s)
    if job.status == JobStatus.RUNNING and job.started_at is not None:
        return job.started_at + timedelta(seconds=conf.time_limit_s + EXPIRY_GRACE_S)
    return None


def _overdue_error(status: str, conf: WhatIfSettings) -> str:
    if status == JobStatus.QUEUED:
        return (
            f"Not started within {conf.queue_timeout_s:g} s: the what-if workers are busy or "
            "not running. Ask again later."
        )
    return (
        f"Stopped: the preview ran past its time limit of {conf.time_limit_s:g} s and its "
        "process did not report back. Try a smaller change, or ask an operator to raise "
        "HEADROOM_WHATIF_TIME_LIMIT_S."
    )


def whatif_expire(*, now: datetime | None = None, job_id: int | None = None) -> int:
    """Fail the overdue unfinished jobs (only ``job_id``, when given) with the reason; how
    many were failed."""
    conf = whatif_settings()
    now = now or timezone.now()
    queued_before = now - timedelta(seconds=conf.queue_timeout_s)
    running_before = now - timedelta(seconds=conf.time_limit_s + EXPIRY_GRACE_S)
    rows = WhatIfJob.objects.all() if job_id is None else WhatIfJob.objects.filter(pk=job_id)
    failed = 0
    for status, field, before in (
        (JobStatus.QUEUED, "created_at", queued_before),
        (JobStatus.RUNNING, "started_at", running_before),
    ):
        overdue = rows.filter(status=status, **{f"{field}__lt": before})
        # Read first: nearly always there is none, and a read takes no write lock.
        if overdue.exists():
            failed += overdue.update(
                status=JobStatus.FAILED, finished_at=now, error=_overdue_error(status, conf)
            )
    return failed


def whatif_submit(
    *, change: WhatIfChange, user: Actor | None, now: datetime | None = None
) -> WhatIfJob:
    """Check ``change`` and queue its preview as a job; the solve starts once the row is
    committed, off this thread (see the module docstring).

    Raises ``ValidationError`` naming the field for a change the preview would refuse, and
    ``WhatIfRefused`` when a bound (per user, the viewer rate, the total queue) is reached.
    """
    whatif_validate(change=change)
    conf = whatif_settings()
    now = now or timezone.now()
    # Every signed-in user is a stored User (the project keeps Django's user model).
    requested_by = user if isinstance(user, User) else None
    window_start = now - timedelta(seconds=RATE_WINDOW_S)
    with transaction.atomic():
        _serialized()
        # The counts the bounds and the queue position need, and whether any unfinished job
        # is overdue (nearly never: the expiry then runs and the counts are taken again), in
        # one query: a burst of submits waits on each other's, so each statement counts.
        counts = _submit_counts(conf=conf, requested_by=requested_by, now=now)
        if counts["overdue"]:
            whatif_expire(now=now)
            counts = _submit_counts(conf=conf, requested_by=requested_by, now=now)
        if requested_by is not None and counts["mine"] >= conf.per_user:
            mine = list(WhatIfJob.objects.filter(status__in=ACTIVE, requested_by=requested_by))
            ends = [d for d in (_deadline(job, conf) for job in mine) if d is not None]
            wait = min(ends) - now if ends else timedelta(seconds=conf.time_limit_s)
            raise WhatIfRefused(
                f"You have {len(mine)} what-ifs queued or running (at most "
                f"{conf.per_user} at a time); wait for one to finish.",
                retry_after_s=min(wait.total_seconds(), conf.time_limit_s),
            )
        if (
            requested_by is not None
            and counts["recent"] >= conf.viewer_per_hour
            and rate_limited(requested_by)
        ):
            # The one whose ageing out lets this user ask again.
            recent = list(
                WhatIfJob.objects.filter(requested_by=requested_by, created_at__gt=window_start)
                .order_by("-created_at")
                .values_list("created_at", flat=True)[: conf.viewer_per_hour]
            )
            wait = recent[-1] + timedelta(seconds=RATE_WINDOW_S) - now
            raise WhatIfRefused(
                f"A viewer may ask for {conf.viewer_per_hour} what-ifs an hour; "
                f"try again in {max(1, math.ceil(wait.total_seconds()))} s.",
                retry_after_s=wait.total_seconds(),
            )
        if counts["unfinished"] >= conf.queue:
            raise WhatIfRefused(
                f"The what-if queue is full ({counts['unfinished']} queued or running); try "
                "again shortly.",
                retry_after_s=conf.time_limit_s,
                busy=True,
            )
        job = WhatIfJob.objects.create(
            tenant=change.tenant,
            change=change_as_dict(change),
            requested_by=requested_by,
            created_at=now,
        )
        # Submits are serialized, so every queued job is older than this one.
        job.queue_ahead = counts["queued"]
    transaction.on_commit(lambda: _send(job))
    return job


def _submit_counts(
    *, conf: WhatIfSettings, requested_by: User | None, now: datetime
) -> dict[str, int]:
    window_start = now - timedelta(seconds=RATE_WINDOW_S)
    active = Q(status__in=ACTIVE)
    overdue = Q(
        status=JobStatus.QUEUED, created_at__lt=now - timedelta(seconds=conf.queue_timeout_s)
    ) | Q(
        status=JobStatus.RUNNING,
        started_at__lt=now - timedelta(seconds=conf.time_limit_s + EXPIRY_GRACE_S),
    )
    counts: dict[str, int] = WhatIfJob.objects.aggregate(
        unfinished=Count("pk", filter=active),
        queued=Count("pk", filter=Q(status=JobStatus.QUEUED)),
        mine=Count("pk", filter=active & Q(requested_by=requested_by)),
        recent=Count("pk", filter=Q(requested_by=requested_by, created_at__gt=window_start)),
        overdue=Count("pk", filter=overdue),
    )
    return counts


# Drainer leases: a child takes one before it starts (its parent takes it for it), so at most
# HEADROOM_WHATIF_WORKERS children exist at once across every web process, and a burst of
# submits starts one child, not one per web worker. A lease names its holder and lapses at
# ``expires_at`` (renewed with each job), so a child that died frees it.
LEASE_PREFIX = "whatif-drainer-"
# How long a lease holds before its child has claimed a job (a child's start takes seconds).
LEASE_START_S = 120.0


@dataclass(frozen=True)
class Lease:
    name: str
    holder: str


def _lease_take(*, now: datetime | None = None, holder: str | None = None) -> Lease | None:
    """A drainer lease that is free or lapsed, taken (one conditional UPDATE each); None when
    every one is held."""
    now = now or timezone.now()
    holder = holder or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
    names = [f"{LEASE_PREFIX}{n}" for n in range(whatif_settings().workers)]
    free = Q(holder="") | Q(expires_at__lt=now) | Q(expires_at__isnull=True)
    # One read first: in a burst every lease is held, and a read takes no write lock.
    rows = {
        name: holder == "" or expires_at is None or expires_at < now
        for name, holder, expires_at in PlannerLock.objects.filter(name__in=names).values_list(
            "name", "holder", "expires_at"
        )
    }
    for name in names:
        if name not in rows:
            PlannerLock.objects.get_or_create(name=name)
            rows[name] = True
    for name in [n for n in names if rows[n]]:
        taken = PlannerLock.objects.filter(free, name=name).update(
            holder=holder, expires_at=now + timedelta(seconds=LEASE_START_S)
        )
        if taken:
            return Lease(name=name, holder=holder)
    return None


def _lease_free(*, now: datetime | None = None) -> bool:
    """Whether a drainer lease is free, lapsed or not made yet (one read)."""
    now = now or timezone.now()
    names = [f"{LEASE_PREFIX}{n}" for n in range(whatif_settings().workers)]
    held = PlannerLock.objects.filter(name__in=names).exclude(holder="").filter(expires_at__gte=now)
    return held.count() < len(names)


def _lease_renew(lease: Lease) -> None:
    conf = whatif_settings()
    hold = conf.time_limit_s + EXPIRY_GRACE_S + LEASE_START_S
    PlannerLock.objects.filter(name=lease.name, holder=lease.holder).update(
        expires_at=timezone.now() + timedelta(seconds=hold)
    )


def _lease_release(lease: Lease) -> None:
    PlannerLock.objects.filter(name=lease.name, holder=lease.holder).update(
        holder="", expires_at=None
    )


def _drainer_would_claim() -> bool:
    """Whether a job is queued and fewer than the bound run."""
    counts: dict[str, int] = {
        str(status): int(n)
        for status, n in WhatIfJob.objects.filter(status__in=ACTIVE)
        .order_by()
        .values("status")
        .annotate(n=Count("pk"))
        .values_list("status", "n")
    }
    queued, running = counts.get(JobStatus.QUEUED, 0), counts.get(JobStatus.RUNNING, 0)
    return queued > 0 and running < whatif_settings().workers


def _drainer_args() -> list[Any] | None:
    """The arguments of a new drainer child, with the lease taken for it; None when nothing
    is queued or every lease is held (its holder drains what is queued)."""
    # In a burst of submits every lease is held: one read answers, in each web process.
    if not _lease_free() or not WhatIfJob.objects.filter(status=JobStatus.QUEUED).exists():
        return None
    lease = _lease_take()
    if lease is None:
        return None
    return [None, True, lease.name, lease.holder]


def _drainer_ended(args: Sequence[Any], reason: str) -> None:
    """A drainer child ended without finishing: free its lease (its running job is failed
    once past its limit, ``whatif_expire``)."""
    if len(args) >= 4 and args[2]:
        _lease_release(Lease(name=str(args[2]), holder=str(args[3])))


# Without a broker: the children that drain the queue, at most HEADROOM_WHATIF_WORKERS of them
# at once (the leases bound them across web processes).
_POOL = ChildPool(
    WHATIF_TASK,
    start=_drainer_args,
    size=lambda: whatif_settings().workers,
    # A child drains the whole queue, one job after another, each within its own limit.
    time_limit_s=lambda: (whatif_settings().queue + 1) * (whatif_settings().time_limit_s + 5),
    nice=lambda: whatif_settings().nice,
    on_exit=_drainer_ended,
)


def _send(job: WhatIfJob) -> None:
    if app.conf.task_always_eager and django_settings.HEADROOM_ISOLATE_TASKS:
        _POOL.kick()
        return
    # A broker: a worker drains the queue (a broker down fails the row, the API's 503).
    # In-process (the test suite): the queue is drained here, and the job read back solved.
    job_send(WhatIfJob, job.pk, WHATIF_TASK, job.pk)
    if app.conf.task_always_eager:
        job.refresh_from_db()


def _claim(*, now: datetime | None = None) -> WhatIfJob | None:
    """Move the oldest queued job to running, if fewer than the bound run; None otherwise.

    The decision is one UPDATE whose WHERE counts the running jobs, so no lock is held
    between statements: the drainer runs at a low CPU priority, and a lock it held while the
    scheduler set it aside would stall every submit (priority inversion).
    """
    conf = whatif_settings()
    now = now or timezone.now()
    whatif_expire(now=now)
    oldest = (
        WhatIfJob.objects.filter(status=JobStatus.QUEUED)
        .order_by("created_at", "pk")
        .values_list("pk", flat=True)
        .first()
    )
    if oldest is None:
        return None
    running = (
        WhatIfJob.objects.filter(status=JobStatus.RUNNING)
        .order_by()
        .values("status")
        .annotate(n=Count("pk"))
        .values("n")
    )
    # Two drainers that pick the same job: the second finds it running and takes nothing.
    claimed = (
        WhatIfJob.objects.filter(pk=oldest, status=JobStatus.QUEUED)
        .alias(running=Coalesce(Subquery(running), 0))
        .filter(running__lt=conf.workers)
        .update(status=JobStatus.RUNNING, started_at=now)
    )
    if not claimed:
        return None
    return WhatIfJob.objects.get(pk=oldest)


@contextlib.contextmanager
def _alarm(seconds: float | None) -> Iterator[None]:
    """Raise ``WhatIfTimeLimit`` in this (main) thread after ``seconds``; off the main thread,
    or with None, nothing (the preview's own checks and the solver's limit still hold)."""
    usable = (
        seconds is not None
        and hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
    )
    if not usable:
        yield
        return
    assert seconds is not None

    def stop(signum: int, frame: Any) -> None:
        raise WhatIfTimeLimit(
            f"Stopped: the preview ran past its time limit of {seconds:g} s. Try a smaller "
            "change, or ask an operator to raise HEADROOM_WHATIF_TIME_LIMIT_S."
        )

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _finish(job: WhatIfJob, *, status: str, error: str = "", result: Any = None) -> None:
    # Only a job still running: one failed by the expiry meanwhile keeps its reason.
    WhatIfJob.objects.filter(pk=job.pk, status=JobStatus.RUNNING).update(
        status=status, finished_at=timezone.now(), error=error, result=result
    )


def _messages(exc: ValidationError) -> str:
    if hasattr(exc, "error_dict"):
        return "; ".join(
            f"{'' if name == '__all__' else name + ': '}{message}"
            for name, messages in exc.message_dict.items()
            for message in messages
        )
    return "; ".join(exc.messages)


def whatif_run(
    *, job: WhatIfJob, clock: Callable[[], float] = time.monotonic, hard_limit: bool = False
) -> WhatIfJob:
    """Solve the running ``job`` and store its result or why it failed; never raises for an
    ordinary failure. ``hard_limit``: also stop it with an alarm at the limit."""
    conf = whatif_settings()
    try:
        with _alarm(conf.time_limit_s if hard_limit else None):
            result = whatif_preview(
                change=change_from_dict(job.change), time_limit_s=conf.time_limit_s, clock=clock
            )
    except WhatIfTimeLimit as exc:
        _finish(job, status=JobStatus.FAILED, error=str(exc))
    except ValidationError as exc:
        # The records changed since it was checked (a tenant or tier deleted).
        _finish(job, status=JobStatus.FAILED, error=_messages(exc))
    except Exception as exc:
        logger.exception("what-if #%s failed", job.pk)
        _finish(job, status=JobStatus.FAILED, error=f"The preview failed: {exc}")
    else:
        _finish(job, status=JobStatus.SUCCEEDED, result=result_as_dict(result))
    job.refresh_from_db()
    return job


def whatif_drain(
    *,
    isolated: bool = False,
    lease: Lease | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Solve queued jobs, oldest first, while fewer than the bound run; how many it solved.

    ``isolated``: this is a child process of the web server (or a worker) doing nothing else,
    so it lowers its CPU priority and stops a job with an alarm at its limit. ``lease``: the
    drainer lease taken for this child; renewed with each job, released at the end, and taken
    again when a job was queued meanwhile (a kick that found it held left that job to this
    child).
    """
    if isolated and os.getpriority(os.PRIO_PROCESS, 0) < whatif_settings().nice:
        # Started without the pool's niceness (a worker started by hand): take it now.
        with contextlib.suppress(OSError):
            os.nice(whatif_settings().nice - os.getpriority(os.PRIO_PROCESS, 0))
    hard_limit = isolated or not app.conf.task_always_eager
    solved = 0
    try:
        while True:
            while (job := _claim()) is not None:
                if lease is not None:
                    _lease_renew(lease)
                whatif_run(job=job, clock=clock, hard_limit=hard_limit)
                solved += 1
            if lease is None:
                return solved
            _lease_release(lease)
            # Released first, then looked: a job queued before the release is seen here, one
            # queued after it finds the lease free and starts a child of its own. At the
            # bound (a job still running whose process died, until it is failed past its
            # limit), there is nothing to take now: stop rather than spin.
            if not _drainer_would_claim():
                lease = None
                return solved
            taken = _lease_take(holder=lease.holder)
            if taken is None:
                lease = None
                return solved  # another child holds it now, and drains
            lease = taken
    finally:
        if lease is not None:
            _lease_release(lease)


def whatif_job_for(*, user: Actor | None, job_id: int) -> WhatIfJob | None:
    """The job ``job_id`` if ``user`` may read it (they asked for it, or they are a policy
    admin), overdue ones failed first; None otherwise."""
    job = WhatIfJob.objects.select_related("requested_by").filter(pk=job_id).first()
    if job is None:
        return None
    if job.requested_by_id != getattr(user, "pk", None) and POLICY_ADMIN not in user_roles(user):
        return None
    deadline = _deadline(job, whatif_settings())
    if deadline is not None and deadline < timezone.now():
        whatif_expire(job_id=job.pk)
        job.refresh_from_db()
    return job


def queue_position(job: WhatIfJob) -> int | None:
    """How many queued jobs are ahead of ``job`` (None unless it is queued)."""
    if job.status != JobStatus.QUEUED:
        return None
    if job.queue_ahead is not None:
        return job.queue_ahead
    return (
        WhatIfJob.objects.filter(status=JobStatus.QUEUED, created_at__lte=job.created_at)
        .exclude(pk=job.pk)
        .exclude(created_at=job.created_at, pk__gt=job.pk)
        .count()
    )
