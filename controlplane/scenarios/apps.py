from django.apps import AppConfig


class ScenariosConfig(AppConfig):
    name = "controlplane.scenarios"
    label = "scenarios"
