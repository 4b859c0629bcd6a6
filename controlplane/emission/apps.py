from django.apps import AppConfig


class EmissionConfig(AppConfig):
    name = "controlplane.emission"
    label = "emission"
    verbose_name = "Emission"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # Registers the app's Celery tasks; imported here because they import models, which
        # must wait for the app registry.
        from controlplane.emission import tasks  # noqa: F401
