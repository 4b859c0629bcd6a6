"""Routes under /api/finance/."""

from django.urls import path

from controlplane.finance import api

urlpatterns = [
    path("forecast/", api.ForecastView.as_view(), name="finance-forecast"),
    path("forecast/opencost/", api.OpenCostAllocationView.as_view(), name="finance-opencost"),
    path("commitments/", api.CommitmentsView.as_view(), name="finance-commitments"),
    path("promises/", api.PromisesView.as_view(), name="finance-promises"),
    path("showback/", api.ShowbackView.as_view(), name="finance-showback"),
    path("history/", api.HistoryView.as_view(), name="finance-history"),
]
