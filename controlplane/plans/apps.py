from django.apps import AppConfig


class PlansConfig(AppConfig):
    name = "controlplane.plans"
    label = "plans"
