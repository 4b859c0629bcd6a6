"""Headroom's workers: the Celery app and its tasks, Ray benchmark workers, and the simulators
the pipeline is tested against."""

from workers.celery import app as celery_app

__all__ = ["celery_app"]
