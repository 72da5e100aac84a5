"""API tokens: the token sign-in for scripts and the CLI (``/api/v1/auth/token/``), and a
user's own tokens, listed, made and revoked (``/api/v1/auth/tokens/``, what the /tokens/
page calls). The pages use the session instead. Each token expires and ends with a
password change (``annotation.api_tokens``)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny, BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.api.inputs import InputSerializer
from annotation.api.permissions import request_user
from annotation.api.tokens import (
    API_TOKEN_STATES,
    SIGN_IN_TOKEN_NAME,
    api_token_create,
    api_token_revoke,
    api_token_state,
    api_tokens_of,
)
from annotation.login_lockout import client_address, sign_in_record
from annotation.models import ApiToken, ApiTokenScope


class TokenCreateInputSerializer(InputSerializer):
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
        description="Send it as `Authorization: Token <token>`. Each call makes a new "
        "full-access token, named `Token sign-in`, which expires after "
        "STEPLAB_API_TOKEN_DAYS days and ends when the password changes; past "
        "STEPLAB_API_TOKENS_PER_USER tokens the oldest sign-in tokens are revoked.",
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
        issued = api_token_create(user=user, name=SIGN_IN_TOKEN_NAME, sign_in=True)
        return Response(TokenOutputSerializer({"token": issued.key}).data)

    @extend_schema(
        tags=["auth"],
        operation_id="auth_token_destroy",
        summary="Revoke the caller's API token",
        description="Revokes the token the request is made with; with a session, every "
        "token of the caller.",
        responses={204: None},
    )
    def delete(self, request: Request) -> Response:
        tokens = ApiToken.objects.filter(user=request_user(request))
        if isinstance(request.auth, ApiToken):
            tokens = tokens.filter(pk=request.auth.pk)
        tokens.delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- a user's own tokens --------------------------------------------------------------


class ApiTokenOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    scope = serializers.ChoiceField(
        choices=ApiTokenScope.choices,
        help_text="`read`: GET only; `full`: whatever the user may do.",
    )
    prefix = serializers.CharField(help_text="The key's first characters, to tell it apart.")
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    last_used_at = serializers.DateTimeField(
        allow_null=True, help_text="To within five minutes; null if never used."
    )
    state = serializers.ChoiceField(
        choices=API_TOKEN_STATES,
        help_text="`password_changed`: the password changed since it was made, which ended it.",
    )


class ApiTokenCreateInputSerializer(InputSerializer):
    name = serializers.CharField(max_length=100, help_text="What the token is for.")
    scope = serializers.ChoiceField(choices=ApiTokenScope.choices, default=ApiTokenScope.FULL)


class ApiTokenCreatedSerializer(ApiTokenOutputSerializer):
    key = serializers.CharField(help_text="The token itself: shown here once, never again.")


def _token_payload(token: ApiToken, *, state: str, key: str | None = None) -> dict[str, Any]:
    payload = {
        field: getattr(token, field)
        for field in ("id", "name", "scope", "prefix", "created_at", "expires_at")
    }
    payload.update(last_used_at=token.last_used_at, state=state)
    if key is not None:
        payload["key"] = key
    return payload


class ApiTokenListCreateApi(APIView):
    @extend_schema(
        tags=["auth"],
        operation_id="auth_tokens_list",
        summary="Your API tokens",
        description="Newest first, with whether each still works.",
        responses={200: ApiTokenOutputSerializer(many=True)},
    )
    def get(self, request: Request) -> Response:
        user = request_user(request)
        rows = [
            _token_payload(token, state=api_token_state(token=token, user=user))
            for token in api_tokens_of(user=user)
        ]
        return Response(ApiTokenOutputSerializer(rows, many=True).data)

    @extend_schema(
        tags=["auth"],
        operation_id="auth_tokens_create",
        summary="Make an API token",
        description="A named token, read-only or full, expiring after "
        "STEPLAB_API_TOKEN_DAYS days. The key is in this answer only.",
        request=ApiTokenCreateInputSerializer,
        responses={
            201: ApiTokenCreatedSerializer,
            400: OpenApiResponse(description="No name, or STEPLAB_API_TOKENS_PER_USER held."),
        },
    )
    def post(self, request: Request) -> Response:
        data = ApiTokenCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        issued = api_token_create(user=request_user(request), **data.validated_data)
        payload = _token_payload(issued.token, state="active", key=issued.key)
        return Response(ApiTokenCreatedSerializer(payload).data, status=status.HTTP_201_CREATED)


class ApiTokenRevokeApi(APIView):
    @extend_schema(
        tags=["auth"],
        operation_id="auth_tokens_revoke",
        summary="Revoke one of your API tokens",
        responses={
            204: None,
            404: OpenApiResponse(description="You hold no token with this id."),
        },
    )
    def delete(self, request: Request, token_id: int) -> Response:
        if not api_token_revoke(user=request_user(request), token_id=token_id):
            raise NotFound("No such token.")
        return Response(status=status.HTTP_204_NO_CONTENT)
