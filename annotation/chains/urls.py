from django.urls import path

from annotation.chains.api.bulk import BulkActionApi, BulkActionListApi, BulkPreviewApi
from annotation.chains.api.chains import (
    ChainDetailApi,
    ChainListApi,
    ChainRequeueApi,
    ChainReviewerApi,
)

urlpatterns = [
    path("projects/<id:project_id>/chains/", ChainListApi.as_view(), name="api-project-chains"),
    path("chains/<id:chain_id>/", ChainDetailApi.as_view(), name="api-chain"),
    path("chains/<id:chain_id>/requeue/", ChainRequeueApi.as_view(), name="api-chain-requeue"),
    path("chains/<id:chain_id>/reviewer/", ChainReviewerApi.as_view(), name="api-chain-reviewer"),
    path(
        "projects/<id:project_id>/chains/bulk/preview/",
        BulkPreviewApi.as_view(),
        name="api-chains-bulk-preview",
    ),
    path(
        "projects/<id:project_id>/chains/bulk/",
        BulkActionListApi.as_view(),
        name="api-chains-bulk",
    ),
    path(
        "projects/<id:project_id>/chains/bulk/<id:bulk_id>/",
        BulkActionApi.as_view(),
        name="api-chains-bulk-action",
    ),
]
