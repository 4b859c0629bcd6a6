from django.apps import AppConfig


class EmissionConfig(AppConfig):
    name = "controlplane.emission"
    label = "emission"
    verbose_name = "Emission"
    default_auto_field = "django.db.models.BigAutoField"
