"""Routes of the gold chain endpoints (leads only)."""

from django.urls import path

from annotation.api.gold import (
    GoldChainListApi,
    GoldFromImportApi,
    GoldMarkApi,
    GoldScoresApi,
    GoldUnmarkApi,
    ScreeningResetApi,
)

urlpatterns = [
    path("projects/<id:project_id>/gold/", GoldChainListApi.as_view(), name="api-gold-chains"),
    path("projects/<id:project_id>/gold/mark/", GoldMarkApi.as_view(), name="api-gold-mark"),
    path("projects/<id:project_id>/gold/unmark/", GoldUnmarkApi.as_view(), name="api-gold-unmark"),
    path(
        "projects/<id:project_id>/gold/from-import/",
        GoldFromImportApi.as_view(),
        name="api-gold-from-import",
    ),
    path("projects/<id:project_id>/gold/scores/", GoldScoresApi.as_view(), name="api-gold-scores"),
    path(
        "projects/<id:project_id>/gold/screenings/<id:user_id>/reset/",
        ScreeningResetApi.as_view(),
        name="api-gold-screening-reset",
    ),
]
