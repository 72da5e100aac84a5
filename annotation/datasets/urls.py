"""Routes of the datasets slice: imports, snapshots and exports, evaluation sets."""

from django.urls import path

from annotation.datasets.api.evaluation_sets import EvaluationSetDetailApi, ProjectEvaluationSetsApi
from annotation.datasets.api.exports import ExportApi
from annotation.datasets.api.imports import ImportCreateApi, ImportJobApi
from annotation.datasets.api.snapshots import SnapshotDiffApi, SnapshotListCreateApi

urlpatterns = [
    path(
        "projects/<id:project_id>/imports/",
        ImportCreateApi.as_view(),
        name="api-project-imports",
    ),
    path(
        "projects/<id:project_id>/imports/<id:job_id>/",
        ImportJobApi.as_view(),
        name="api-project-import-job",
    ),
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
    path(
        "projects/<id:project_id>/evaluation-sets/",
        ProjectEvaluationSetsApi.as_view(),
        name="api-evaluation-sets",
    ),
    path(
        "evaluation-sets/<id:evaluation_set_id>/",
        EvaluationSetDetailApi.as_view(),
        name="api-evaluation-set",
    ),
]
