"""Routes of the annotator workspace's own endpoints."""

from django.urls import path

from annotation.api.workspace import AssignmentFlagView, AssignmentSubmitAndNextView, MyStatsView

urlpatterns = [
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
]
