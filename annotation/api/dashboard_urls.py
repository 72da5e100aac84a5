"""Routes of the lead dashboard's data and of the machine sources' quality."""

from django.urls import path

from annotation.api.dashboard import DashboardApi
from annotation.api.machine_quality import MachineQualityApi

urlpatterns = [
    path(
        "projects/<id:project_id>/dashboard/",
        DashboardApi.as_view(),
        name="api-project-dashboard",
    ),
    path(
        "projects/<id:project_id>/machine-quality/",
        MachineQualityApi.as_view(),
        name="api-project-machine-quality",
    ),
]
