"""Headroom's worker side: the Celery entry point (``workers.celery``), the Ray benchmark
workers (``workers.benchmarks``) and the simulators the pipeline is tested against
(``workers.simulators``: the fleet, one replica, a webhook receiver). Only the entry point
knows Django; the rest imports ``planner`` only."""
