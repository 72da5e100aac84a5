"""The rules of an API token, in one place for both of the API's doors (DRF's
authentication class and the labeling queue's token door): how a key is stored, when a
stored token still opens the API, and for which methods.

A token is refused when its user is inactive, when it has expired, or when its user's
password changed since it was issued: ``password_mark`` is a digest of the password
hash the user had then, so any change of password (the page, the admin, the ``changepassword``
command) ends every token without a hook on any of them, as Django's session hash ends
other sessions."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta
from typing import Any

from annotation.models import ApiToken, ApiTokenScope

# Methods a read-only token may use.
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# ``last_used_at`` is written when it is older than this, not on every request.
API_TOKEN_USE_PRECISION = timedelta(minutes=5)
PREFIX_LENGTH = 8
_PASSWORD_MARK_SALT = "steplab.api_tokens.password_mark"


def key_new() -> str:
    """A new token key: 40 hex characters, as DRF's tokens were."""
    return secrets.token_hex(20)


def key_hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def password_mark(user: Any) -> str:
    """What ties a token to the password its user has now: a SHA-256 of the stored
    password hash (itself salted and slow), so it tells nothing the hash does not, and
    does not depend on SECRET_KEY (rotating the key ends sessions, not tokens)."""
    return hashlib.sha256(f"{_PASSWORD_MARK_SALT}:{user.password}".encode()).hexdigest()


def token_refusal(*, token: ApiToken, user: Any, now: datetime) -> str | None:
    """Why the stored ``token`` of ``user`` does not authenticate now (a 401), or None
    when it does: an inactive user, an expired token, one from before a password change.
    What it may do once authenticated is ``token_read_only``'s (a 403)."""
    if not user.is_active:
        return "User inactive or deleted."
    if token.expires_at <= now:
        return "Token expired."
    if not hmac.compare_digest(token.password_mark, password_mark(user)):
        return "Token ended by a password change."
    return None


def token_read_only(*, token: ApiToken, method: str) -> bool:
    """True when ``token`` may not make a ``method`` request: it is read-only and the
    method writes."""
    return token.scope != ApiTokenScope.FULL and method.upper() not in READ_METHODS


def token_use_due(*, token: ApiToken, now: datetime) -> bool:
    """Whether this use should be written to ``last_used_at``."""
    return token.last_used_at is None or token.last_used_at <= now - API_TOKEN_USE_PRECISION
