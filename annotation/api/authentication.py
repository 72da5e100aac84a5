"""API authentication: DRF's token scheme with a cheaper lookup.

Kept in its own module, importing nothing from DRF's views: the settings name this class,
and DRF reads its authentication classes while ``rest_framework.views`` is being imported.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from annotation.queue.access import user_for_token


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


def token_key(request: HttpRequest) -> str | None:
    """The key of an ``Authorization: Token <key>`` header, read as DRF's
    ``TokenAuthentication`` reads it; None for any other or malformed header (DRF then
    answers it, with its own messages)."""
    parts = request.META.get("HTTP_AUTHORIZATION", "").split()
    if len(parts) != 2 or parts[0].lower() != "token" or not parts[1].isascii():
        return None
    return parts[1]
