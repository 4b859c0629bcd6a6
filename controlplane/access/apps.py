from django.apps import AppConfig


class AccessConfig(AppConfig):
    name = "controlplane.access"
    label = "access"
    verbose_name = "Tenant keys"

    def ready(self) -> None:
        # Registers the schema's security scheme for the key (drf-spectacular finds the
        # extension by subclass) and the history stamp of changes made with a key.
        from controlplane.access import audit, schema  # noqa: F401
