from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The shared kit; its one table is the beat ticks' record (``models.ScheduleTick``)."""

    name = "controlplane.core"
    label = "core"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from controlplane.core import checks  # noqa: F401  (registers the system checks)
