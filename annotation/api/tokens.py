"""Making and revoking API tokens (the rules they are checked by: ``annotation.api_tokens``).

A key is shown once, when it is made, and never stored: ``ApiTokenIssued`` carries it
back to the caller beside the row."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from annotation.api_tokens import PREFIX_LENGTH, key_hash, key_new, password_mark
from annotation.models import ApiToken, ApiTokenScope

# What ``api_token_state`` says of a token.
API_TOKEN_STATES = ("active", "expired", "password_changed")
# The name of the tokens the token sign-in (``POST /api/v1/auth/token/``) makes.
SIGN_IN_TOKEN_NAME = "Token sign-in"


@dataclass(frozen=True, slots=True)
class ApiTokenIssued:
    token: ApiToken
    key: str  # shown once; only its hash is stored


def api_tokens_of(*, user: Any) -> QuerySet[ApiToken]:
    """The user's tokens, newest first (expired ones and those a password change ended
    included, until they are revoked or make room for new ones)."""
    return ApiToken.objects.filter(user=user).order_by("-created_at", "-id")


def api_token_state(*, token: ApiToken, user: Any) -> str:
    """``active``, ``expired`` or ``password_changed`` (the password changed since the
    token was made, which ended it), as the token's page and API show it."""
    if token.expires_at <= timezone.now():
        return "expired"
    if token.password_mark != password_mark(user):
        return "password_changed"
    return "active"


def api_token_create(
    *, user: Any, name: str, scope: str = ApiTokenScope.FULL, sign_in: bool = False
) -> ApiTokenIssued:
    """Issue a token to ``user``, expiring in STEPLAB_API_TOKEN_DAYS. The user's tokens
    that no longer work (expired, or from before a password change) are deleted first.
    A user holds at most STEPLAB_API_TOKENS_PER_USER: beyond it a ``sign_in`` token
    replaces the oldest sign-in tokens, any other is refused (ValidationError).

    Precondition: ``user`` is active and has just proved their password or session."""
    name = name.strip()
    if not name:
        raise ValidationError({"name": ["Give the token a name."]})
    if scope not in ApiTokenScope.values:
        raise ValidationError({"scope": [f"One of: {', '.join(ApiTokenScope.values)}."]})
    now = timezone.now()
    mark = password_mark(user)
    limit = settings.STEPLAB_API_TOKENS_PER_USER
    with transaction.atomic():
        # The user's row, locked: two requests at once count the same tokens.
        get_user_model().objects.select_for_update().filter(pk=user.pk).values_list("pk").get()
        mine = ApiToken.objects.filter(user=user)
        mine.filter(Q(expires_at__lte=now) | ~Q(password_mark=mark)).delete()
        over = mine.count() + 1 - limit
        if over > 0 and not sign_in:
            raise ValidationError(
                f"You hold {limit} tokens, the most one person may: revoke one first."
            )
        if over > 0:
            oldest = mine.filter(name=SIGN_IN_TOKEN_NAME).order_by("created_at", "id")
            doomed = list(oldest.values_list("pk", flat=True)[:over])
            ApiToken.objects.filter(pk__in=doomed).delete()
        key = key_new()
        token = ApiToken.objects.create(
            user=user,
            name=name,
            scope=scope,
            key_hash=key_hash(key),
            prefix=key[:PREFIX_LENGTH],
            password_mark=mark,
            created_at=now,
            expires_at=now + timedelta(days=settings.STEPLAB_API_TOKEN_DAYS),
        )
    return ApiTokenIssued(token=token, key=key)


def api_token_revoke(*, user: Any, token_id: int) -> bool:
    """Revoke one of the user's own tokens; False if they hold none with that id."""
    deleted, _ = ApiToken.objects.filter(user=user, pk=token_id).delete()
    return bool(deleted)


def api_token_use(*, token: ApiToken) -> None:
    """Record that ``token`` was used now (called at most once per
    ``API_TOKEN_USE_PRECISION``, see ``token_use_due``)."""
    now = timezone.now()
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    token.last_used_at = now
