from django.apps import AppConfig


class FinanceConfig(AppConfig):
    name = "controlplane.finance"
    label = "finance"

    def ready(self) -> None:
        # Imported when the apps are ready (the modules import models): the task registers
        # with the Celery app, and an activated plan's finance warm-up is connected.
        from controlplane.finance import services, tasks  # noqa: F401

        services.connect()
