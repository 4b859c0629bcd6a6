from django.apps import AppConfig


class FinanceConfig(AppConfig):
    name = "controlplane.finance"
    label = "finance"
