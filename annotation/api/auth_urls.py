from django.urls import path

from annotation.api.auth import ApiTokenListCreateApi, ApiTokenRevokeApi, AuthTokenApi

urlpatterns = [
    path("auth/token/", AuthTokenApi.as_view(), name="api-auth-token"),
    path("auth/tokens/", ApiTokenListCreateApi.as_view(), name="api-auth-tokens"),
    path(
        "auth/tokens/<id:token_id>/",
        ApiTokenRevokeApi.as_view(),
        name="api-auth-token-revoke",
    ),
]
