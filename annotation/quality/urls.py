"""Routes of the quality slice: review and agreement, gold, machine quality."""

from django.urls import path

from annotation.quality.api.gold import (
    GoldChainListApi,
    GoldFromImportApi,
    GoldMarkApi,
    GoldScoresApi,
    GoldUnmarkApi,
    ScreeningResetApi,
)
from annotation.quality.api.machine_quality import MachineQualityApi
from annotation.quality.api.review import (
    AdjudicateApi,
    AgreementApi,
    ChainLabelsApi,
    ChainUnflagApi,
    DisagreementListApi,
    FlagListApi,
)

urlpatterns = [
    path(
        "projects/<id:project_id>/disagreements/",
        DisagreementListApi.as_view(),
        name="api-project-disagreements",
    ),
    path(
        "projects/<id:project_id>/agreement/",
        AgreementApi.as_view(),
        name="api-project-agreement",
    ),
    path("projects/<id:project_id>/flags/", FlagListApi.as_view(), name="api-project-flags"),
    path("chains/<id:chain_id>/unflag/", ChainUnflagApi.as_view(), name="api-chain-unflag"),
    path("chains/<id:chain_id>/labels/", ChainLabelsApi.as_view(), name="api-chain-labels"),
    path("chains/<id:chain_id>/adjudicate/", AdjudicateApi.as_view(), name="api-chain-adjudicate"),
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
    path(
        "projects/<id:project_id>/machine-quality/",
        MachineQualityApi.as_view(),
        name="api-project-machine-quality",
    ),
]
