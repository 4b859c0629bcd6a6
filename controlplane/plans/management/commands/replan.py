"""``manage.py replan``: run one re-plan now, in this process, and print the plan."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from controlplane.plans.conf import replan_settings
from controlplane.plans.models import Plan, ReplanRun
from controlplane.plans.selectors import plan_summary
from controlplane.plans.services import replan_execute, replan_request


class Command(BaseCommand):
    help = (
        "Run one re-plan now in this process: build the placement problem from the database, "
        "solve it, store the plan and print it (cost, allocations per region, unserved, "
        "binding). Exit status 0 when a plan was made or the inputs were unchanged, 1 when "
        "another re-plan was running (see --wait), 2 when the re-plan failed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--wait",
            action="store_true",
            help=(
                "if another re-plan is running, wait for it to finish (up to --timeout) "
                "instead of skipping"
            ),
        )
        parser.add_argument(
            "--timeout",
            type=float,
            default=None,
            help="seconds --wait waits at most (default: HEADROOM_PLANNER_LOCK_TTL_S)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        timeout = options["timeout"]
        if timeout is not None and not timeout >= 0:
            raise CommandError("--timeout must be zero or more seconds", returncode=2)
        wait_s = 0.0
        if options["wait"]:
            wait_s = timeout if timeout is not None else replan_settings().lock_ttl_s
        queued = replan_request(trigger=Plan.Trigger.COMMAND, enqueue=False)
        run = replan_execute(run_id=queued.pk, wait_s=wait_s)
        assert run is not None  # created just above
        if run.status == ReplanRun.Status.SKIPPED:
            raise CommandError(f"re-plan #{run.pk} skipped: {run.error}", returncode=1)
        if run.status == ReplanRun.Status.FAILED:
            detail = f"\n{plan_summary(run.plan)}" if run.plan is not None else ""
            raise CommandError(f"re-plan #{run.pk} failed: {run.error}{detail}", returncode=2)
        assert run.plan is not None
        if run.status == ReplanRun.Status.UNCHANGED:
            self.stdout.write(
                f"Re-plan #{run.pk}: inputs unchanged since plan v{run.plan.version}; no new plan."
            )
        else:
            self.stdout.write(f"Re-plan #{run.pk} made plan v{run.plan.version}.")
        self.stdout.write(plan_summary(run.plan))
