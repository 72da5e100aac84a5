"""Routes of the annotator workspace's own endpoints."""

from django.urls import path

from annotation.api.workspace import AssignmentFlagView, AssignmentSubmitAndNextView, MyStatsView

urlpatterns = [
    path(
        "assignments/<int:assignment_id>/flag/",
        AssignmentFlagView.as_view(),
        name="assignment-flag",
    ),
    path(
        "assignments/<int:assignment_id>/submit-and-next/",
        AssignmentSubmitAndNextView.as_view(),
        name="assignment-submit-and-next",
    ),
    path("projects/<int:project_id>/my-stats/", MyStatsView.as_view(), name="project-my-stats"),
]
