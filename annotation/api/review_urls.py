from django.urls import path

from annotation.api.review import (
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
]
