from django.apps import AppConfig


class WebConfig(AppConfig):
    name = "controlplane.web"
    label = "web"
    verbose_name = "Operators' pages"
