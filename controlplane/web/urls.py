"""The operators' pages, mounted at ``/``."""

from django.contrib.auth import views as auth_views
from django.urls import path, re_path

from controlplane.web import views

app_name = "web"

urlpatterns = [
    path("", views.fleet, name="fleet"),
    path("plans/", views.plan_list, name="plans"),
    path("plans/active/", views.plan_active, name="plan-active"),
    path("plans/v<int:version>/", views.plan_detail, name="plan"),
    path("plans/v<int:version>/decide/", views.plan_decide, name="plan-decide"),
    path("tenants/", views.tenant_list, name="tenants"),
    path("tenants/<slug:name>/", views.tenant_detail, name="tenant"),
    path("what-if/", views.whatif, name="whatif"),
    # Ids are bigints: more digits cannot name a row.
    re_path(r"^what-if/jobs/(?P<job_id>[0-9]{1,18})/$", views.whatif_job, name="whatif-job"),
    path("drift/", views.drift_alerts, name="drift"),
    path("finance/", views.finance_overview, name="finance"),
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="web/login.html", redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
]
