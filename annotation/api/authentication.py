"""API authentication: ``Authorization: Token <key>`` against ``ApiToken``.

Kept in its own module, importing nothing from DRF's views: the settings name this class,
and DRF reads its authentication classes while ``rest_framework.views`` is being imported.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, QueryDict
from django.utils import timezone
from rest_framework import authentication
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied
from rest_framework.request import Request

from annotation.api.tokens import api_token_use
from annotation.api_tokens import token_read_only, token_refusal, token_use_due
from annotation.labeling.queue.access import user_for_token
from config.uploads import is_multipart


class ApiTokenAuthentication(TokenAuthentication):
    """DRF's ``TokenAuthentication`` (the header, its parsing, its 401 with
    ``WWW-Authenticate: Token``) over ``ApiToken``: the key looked up by its hash with its
    user in one plain query, refused when ``token_refusal`` says so (401), and a
    read-only token asked to write is a 403. ``request.auth`` is the ``ApiToken``."""

    def authenticate(self, request: Request) -> tuple[Any, Any] | None:
        found = super().authenticate(request)
        if found is not None and token_read_only(token=found[1], method=request.method or ""):
            raise PermissionDenied("This token is read-only: it may only read (GET).")
        return found

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        found = user_for_token(key)
        if found is None:
            raise AuthenticationFailed("Invalid token.")
        user, token = found
        now = timezone.now()
        refusal = token_refusal(token=token, user=user, now=now)
        if refusal is not None:
            raise AuthenticationFailed(refusal)
        if token_use_due(token=token, now=now):
            api_token_use(token=token)
        return user, token


class _FormFieldsUnread:
    """The request as Django's CSRF check sees it, with no form fields: the check then
    takes the token from the X-CSRFToken header and reads nothing of the body."""

    POST = QueryDict()

    def __init__(self, request: Request) -> None:
        self._request = request

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)


class SessionAuthentication(authentication.SessionAuthentication):
    """DRF's session scheme, whose CSRF check never parses a multipart body.

    Django's check reads ``request.POST`` for the ``csrfmiddlewaretoken`` field first; for
    an upload that meant spooling the whole file to disk before a wrong token, or a
    caller without the role, was refused. An upload's token must come in the header (the
    pages' fetches send it there for every call)."""

    def enforce_csrf(self, request: Request) -> None:
        if is_multipart(request._request):
            request = _FormFieldsUnread(request)  # type: ignore[assignment]
        super().enforce_csrf(request)


def token_key(request: HttpRequest) -> str | None:
    """The key of an ``Authorization: Token <key>`` header, read as DRF's
    ``TokenAuthentication`` reads it; None for any other or malformed header (DRF then
    answers it, with its own messages)."""
    parts = request.META.get("HTTP_AUTHORIZATION", "").split()
    if len(parts) != 2 or parts[0].lower() != "token" or not parts[1].isascii():
        return None
    return parts[1]
