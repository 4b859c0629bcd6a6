from django.apps import AppConfig


class BenchmarksConfig(AppConfig):
    name = "controlplane.benchmarks"
    label = "benchmarks"
    verbose_name = "Benchmarks"
    default_auto_field = "django.db.models.BigAutoField"
