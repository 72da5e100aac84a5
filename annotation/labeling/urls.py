"""Routes of the labeling slice: the queue's token door first (next and submit are most of
all requests), then the workspace and an annotator's history."""

from django.urls import path

from annotation.labeling.api.assignments import (
    AssignmentNextView,
    AssignmentPrefetchView,
    AssignmentRenewView,
    AssignmentSkipView,
    AssignmentSubmitView,
)
from annotation.labeling.api.history import HistoryChainView, HistoryReviseView, HistoryView
from annotation.labeling.api.workspace import (
    AssignmentFlagView,
    AssignmentSubmitAndNextView,
    MyStatsView,
)

urlpatterns = [
    path(
        "projects/<id:project_id>/assignments/next/",
        AssignmentNextView.as_view(),
        name="assignment-next",
    ),
    path(
        "projects/<id:project_id>/assignments/prefetch/",
        AssignmentPrefetchView.as_view(),
        name="assignment-prefetch",
    ),
    path(
        "assignments/<id:assignment_id>/submit/",
        AssignmentSubmitView.as_view(),
        name="assignment-submit",
    ),
    path(
        "assignments/<id:assignment_id>/renew/",
        AssignmentRenewView.as_view(),
        name="assignment-renew",
    ),
    path(
        "assignments/<id:assignment_id>/skip/",
        AssignmentSkipView.as_view(),
        name="assignment-skip",
    ),
    path(
        "assignments/<id:assignment_id>/flag/",
        AssignmentFlagView.as_view(),
        name="assignment-flag",
    ),
    path(
        "assignments/<id:assignment_id>/submit-and-next/",
        AssignmentSubmitAndNextView.as_view(),
        name="assignment-submit-and-next",
    ),
    path("projects/<id:project_id>/my-stats/", MyStatsView.as_view(), name="project-my-stats"),
    path("projects/<id:project_id>/history/", HistoryView.as_view(), name="api-project-history"),
    path(
        "projects/<id:project_id>/history/<id:annotation_id>/",
        HistoryChainView.as_view(),
        name="api-project-history-chain",
    ),
    path(
        "projects/<id:project_id>/history/<id:annotation_id>/revise/",
        HistoryReviseView.as_view(),
        name="api-project-history-revise",
    ),
]
