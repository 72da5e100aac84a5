"""Django's database sessions (``SESSION_ENGINE``), with what a visitor who has not signed
in may leave bounded: anyone can make a session row, so one without a signed-in user may
hold at most STEPLAB_ANONYMOUS_SESSION_MAX_BYTES of JSON (measured before the signing's
compression, so a repetitive value cannot hide in it) and lives at most
STEPLAB_ANONYMOUS_SESSION_SECONDS; a larger one is refused (a 400) instead of written.
What sign-in keeps there before the user is known fits: allauth's states (its next URLs
bounded by ``sso.AccountAdapter.is_safe_url``), an invitation's id and hash. The SAML
assertion consumer's row holds a response already checked against the IdP's signature,
under a bound of its own (``sso_saml``). The workers delete expired rows hourly
(``annotation.tasks``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import SESSION_KEY
from django.contrib.sessions.backends import db
from django.contrib.sessions.base_session import AbstractBaseSession
from django.core.exceptions import SuspiciousOperation
from django.utils import timezone


class AnonymousSessionTooLarge(SuspiciousOperation):
    """A session with no signed-in user grew past its bound: the request is a 400."""


class SessionStore(db.SessionStore):
    # None: STEPLAB_ANONYMOUS_SESSION_MAX_BYTES and STEPLAB_ANONYMOUS_SESSION_SECONDS.
    anonymous_max_bytes: int | None = None
    anonymous_max_seconds: int | None = None

    def create_model_instance(self, data: dict[str, Any]) -> AbstractBaseSession:
        instance = super().create_model_instance(data)
        if SESSION_KEY in data:
            return instance
        most = self.anonymous_max_bytes or settings.STEPLAB_ANONYMOUS_SESSION_MAX_BYTES
        size = len(self.serializer().dumps(data))
        if size > most:
            raise AnonymousSessionTooLarge(
                f"A session without a signed-in user would hold {size:,} bytes; "
                f"at most {most:,} are kept."
            )
        seconds = self.anonymous_max_seconds or settings.STEPLAB_ANONYMOUS_SESSION_SECONDS
        instance.expire_date = min(
            instance.expire_date, timezone.now() + timedelta(seconds=seconds)
        )
        return instance
