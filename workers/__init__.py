"""Headroom's workers: the Celery app and its tasks, Ray benchmark workers, and the simulators
the pipeline is tested against."""
