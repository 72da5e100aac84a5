"""Routes of the PRM loop under /api/v1/."""

from django.urls import path

from prm_training.api.views import (
    ModelVersionActivateApi,
    ProjectBackbonesApi,
    ProjectEvaluationResultsApi,
    ProjectModelVersionsApi,
    ProjectScoringRunsApi,
    ProjectTrainingRunsApi,
    ProjectTrainingSettingsApi,
    ScoringRunCancelApi,
    ScoringRunDetailApi,
    ScoringRunRetryApi,
    TrainingRunCancelApi,
    TrainingRunDetailApi,
    TrainingRunRetryApi,
)

urlpatterns = [
    path(
        "projects/<id:project_id>/training-runs/",
        ProjectTrainingRunsApi.as_view(),
        name="api-training-runs",
    ),
    path("training-runs/<id:run_id>/", TrainingRunDetailApi.as_view(), name="api-training-run"),
    path(
        "training-runs/<id:run_id>/cancel/",
        TrainingRunCancelApi.as_view(),
        name="api-training-run-cancel",
    ),
    path(
        "training-runs/<id:run_id>/retry/",
        TrainingRunRetryApi.as_view(),
        name="api-training-run-retry",
    ),
    path(
        "projects/<id:project_id>/model-versions/",
        ProjectModelVersionsApi.as_view(),
        name="api-model-versions",
    ),
    path(
        "model-versions/<id:version_id>/activate/",
        ModelVersionActivateApi.as_view(),
        name="api-model-version-activate",
    ),
    path(
        "projects/<id:project_id>/evaluation-results/",
        ProjectEvaluationResultsApi.as_view(),
        name="api-evaluation-results",
    ),
    path(
        "projects/<id:project_id>/backbones/",
        ProjectBackbonesApi.as_view(),
        name="api-backbones",
    ),
    path(
        "projects/<id:project_id>/training-settings/",
        ProjectTrainingSettingsApi.as_view(),
        name="api-training-settings",
    ),
    path(
        "projects/<id:project_id>/scoring-runs/",
        ProjectScoringRunsApi.as_view(),
        name="api-scoring-runs",
    ),
    path(
        "scoring-runs/<id:scoring_run_id>/",
        ScoringRunDetailApi.as_view(),
        name="api-scoring-run",
    ),
    path(
        "scoring-runs/<id:scoring_run_id>/cancel/",
        ScoringRunCancelApi.as_view(),
        name="api-scoring-run-cancel",
    ),
    path(
        "scoring-runs/<id:scoring_run_id>/retry/",
        ScoringRunRetryApi.as_view(),
        name="api-scoring-run-retry",
    ),
]
