"""API authentication: DRF's token scheme with a cheaper lookup.

Kept in its own module, importing nothing from DRF's views: the settings name this class,
and DRF reads its authentication classes while ``rest_framework.views`` is being imported.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, QueryDict
from rest_framework import authentication
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from annotation.queue.access import user_for_token
from config.uploads import is_multipart


class FastTokenAuthentication(TokenAuthentication):
    """DRF's ``TokenAuthentication`` with the key lookup as one plain query.

    The same token table and the same rules (an unknown key or an inactive user is a 401,
    ``Authorization: Token <key>``), but no queryset built on every request: an annotator
    sends ``next`` and ``submit`` all day, and building DRF's
    ``select_related("user").get(key=...)`` cost more than running it."""

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        found = user_for_token(key)
        if found is None:
            raise AuthenticationFailed("Invalid token.")
        user, created = found
        if not user.is_active:
            raise AuthenticationFailed("User inactive or deleted.")
        from rest_framework.authtoken.models import Token

        token = Token(key=key, user=user, created=created)
        token._state.adding = False  # the stored row, as DRF's own lookup would give
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
