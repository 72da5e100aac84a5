from django.urls import path

from annotation.api.datasets import ExportApi, SnapshotDiffApi, SnapshotListCreateApi

urlpatterns = [
    path(
        "projects/<id:project_id>/snapshots/",
        SnapshotListCreateApi.as_view(),
        name="api-project-snapshots",
    ),
    path(
        "projects/<id:project_id>/snapshots/diff/",
        SnapshotDiffApi.as_view(),
        name="api-project-snapshot-diff",
    ),
    path("projects/<id:project_id>/export/", ExportApi.as_view(), name="api-project-export"),
]
