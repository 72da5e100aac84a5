from django.urls import path

from annotation.api.datasets import ExportApi, SnapshotListCreateApi

urlpatterns = [
    path(
        "projects/<id:project_id>/snapshots/",
        SnapshotListCreateApi.as_view(),
        name="api-project-snapshots",
    ),
    path("projects/<id:project_id>/export/", ExportApi.as_view(), name="api-project-export"),
]
