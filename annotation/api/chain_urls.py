from django.urls import path

from annotation.api.chains import ChainDetailApi, ChainListApi, ChainRequeueApi

urlpatterns = [
    path("projects/<id:project_id>/chains/", ChainListApi.as_view(), name="api-project-chains"),
    path("chains/<id:chain_id>/", ChainDetailApi.as_view(), name="api-chain"),
    path("chains/<id:chain_id>/requeue/", ChainRequeueApi.as_view(), name="api-chain-requeue"),
]
