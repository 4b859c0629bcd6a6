from django.apps import AppConfig


class PlansConfig(AppConfig):
    name = "controlplane.plans"
    label = "plans"

    def ready(self) -> None:
        # Registers the app's Celery tasks; imported here because they import models, which
        # must wait for the app registry.
        from controlplane.plans import tasks  # noqa: F401
