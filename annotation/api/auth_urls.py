from django.urls import path

from annotation.api.auth import AuthTokenApi

urlpatterns = [
    path("auth/token/", AuthTokenApi.as_view(), name="api-auth-token"),
]
