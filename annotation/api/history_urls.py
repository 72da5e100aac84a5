"""Routes of an annotator's own history."""

from django.urls import path

from annotation.api.history import HistoryChainView, HistoryReviseView, HistoryView

urlpatterns = [
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
