"""API authentication: DRF's token scheme with a cheaper lookup.

Kept in its own module, importing nothing from DRF's views: the settings name this class,
and DRF reads its authentication classes while ``rest_framework.views`` is being imported.
"""

from __future__ import annotations

import functools
from typing import Any

from django.db import connection
from django.http import HttpRequest
from rest_framework.authentication import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed


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


@functools.cache
def _token_user_sql() -> str:
    """The user of a token key, with the token's creation time, for the installed user
    model: built once, not on every request."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from annotation.rows import select_columns

    user_model = get_user_model()
    return (
        f"SELECT {select_columns(user_model, 'u')}, t.created "
        f"FROM {user_model._meta.db_table} u "
        f"JOIN {Token._meta.db_table} t ON t.user_id = u.id WHERE t.key = %s"
    )


def user_for_token(key: str) -> tuple[Any, Any] | None:
    """(user, token creation time) for an API token key, active or not; None if unknown."""
    from django.contrib.auth import get_user_model

    from annotation.rows import model_from_row

    with connection.cursor() as cursor:
        cursor.execute(_token_user_sql(), [key])
        row = cursor.fetchone()
    if row is None:
        return None
    return model_from_row(get_user_model(), row[:-1]), row[-1]
