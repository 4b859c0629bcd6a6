from django.apps import AppConfig


class CoreConfig(AppConfig):
    """The shared kit; its one table is the beat ticks' record (``models.ScheduleTick``)."""

    name = "controlplane.core"
    label = "core"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from controlplane.core import checks  # noqa: F401  (registers the system checks)
        from controlplane.core.sqlite import set_journal_mode

        connection_created.connect(set_journal_mode, dispatch_uid="headroom-sqlite-journal-mode")
