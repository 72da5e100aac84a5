"""Routes of the evaluation set endpoints."""

from django.urls import path

from annotation.api.evaluation_sets import EvaluationSetDetailApi, ProjectEvaluationSetsApi

urlpatterns = [
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
