from django.apps import AppConfig


class PipelineConfig(AppConfig):
    name = "controlplane.pipeline"
    label = "pipeline"

    def ready(self) -> None:
        # Imported when the apps are ready (the modules import models): the tasks register
        # with the Celery app, and the hand-over from an activated plan to emission is
        # connected (see ``services.after_activation``).
        from controlplane.pipeline import services, tasks  # noqa: F401

        services.connect()
