"""Token login for scripts and the CLI. The pages use the session instead."""

from __future__ import annotations

from django.contrib.auth import authenticate
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.authtoken.models import Token
from rest_framework.permissions import AllowAny, BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.api.permissions import request_user
from annotation.login_lockout import client_address, sign_in_record


class TokenCreateInputSerializer(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    password = serializers.CharField(max_length=4096, style={"input_type": "password"})


class TokenOutputSerializer(serializers.Serializer):
    token = serializers.CharField()


class AuthTokenApi(APIView):
    # Failed attempts are counted and locked out by django-axes, which needs `request`
    # passed to `authenticate` (settings, "Sign-in"); successful ones are never limited.

    def get_permissions(self) -> list[BasePermission]:
        if self.request.method == "POST":
            return [AllowAny()]
        return [IsAuthenticated()]

    @extend_schema(
        tags=["auth"],
        operation_id="auth_token_create",
        summary="Exchange a username and password for an API token",
        description="Send it as `Authorization: Token <token>`. The same token is returned "
        "until it is revoked.",
        request=TokenCreateInputSerializer,
        responses={
            200: TokenOutputSerializer,
            400: OpenApiResponse(description="Wrong username or password."),
            429: OpenApiResponse(
                description="Too many failed sign-ins for this username or address; "
                "`Retry-After` says when to try again."
            ),
        },
        auth=[],
    )
    def post(self, request: Request) -> Response:
        data = TokenCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        user = authenticate(
            request=request._request,
            username=data.validated_data["username"],
            password=data.validated_data["password"],
        )
        if user is None or not user.is_active:
            # One message for both cases: do not reveal which usernames exist.
            raise serializers.ValidationError(
                {"non_field_errors": ["Unable to log in with these credentials."]}
            )
        sign_in_record(username=user.get_username(), address=client_address(request._request))
        token, _ = Token.objects.get_or_create(user=user)
        return Response(TokenOutputSerializer({"token": token.key}).data)

    @extend_schema(
        tags=["auth"],
        operation_id="auth_token_destroy",
        summary="Revoke the caller's API token",
        responses={204: None},
    )
    def delete(self, request: Request) -> Response:
        Token.objects.filter(user=request_user(request)).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)
