from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "controlplane.benchmarks"
    label = "benchmarks"
    verbose_name = "Benchmarks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the app's Celery tasks; imported here because they import models, which
        # must wait for the app registry.
        from controlplane.benchmarks import tasks  # noqa: F401
