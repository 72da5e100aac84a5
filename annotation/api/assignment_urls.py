"""Routes of the labeling queue."""

from django.urls import path

from annotation.api.assignments import (
    AssignmentNextView,
    AssignmentPrefetchView,
    AssignmentRenewView,
    AssignmentSkipView,
    AssignmentSubmitView,
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
]
