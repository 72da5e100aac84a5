"""Route of the lead dashboard's data."""

from django.urls import path

from annotation.api.dashboard import DashboardApi

urlpatterns = [
    path(
        "projects/<id:project_id>/dashboard/",
        DashboardApi.as_view(),
        name="api-project-dashboard",
    ),
]
