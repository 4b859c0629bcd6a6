"""Celery tasks. Each module is imported here so that ``app.autodiscover_tasks`` (which imports
``workers.tasks``) registers every task."""

from workers.tasks import benchmarks as benchmarks
from workers.tasks import emission as emission
from workers.tasks import plans as plans
from workers.tasks import telemetry as telemetry

__all__ = ["benchmarks", "emission", "plans", "telemetry"]
