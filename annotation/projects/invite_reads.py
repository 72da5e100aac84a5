"""Read paths for invitations: the one a link opens (its secret compared in constant
time), where one stands, and a project's open ones for its leads."""

from __future__ import annotations

import hashlib
import hmac
import re
from datetime import datetime

from django.db.models import Case, CharField, Q, QuerySet, Value, When
from django.db.models.functions import Now
from django.http import Http404
from django.utils import timezone

from annotation.models import Invite, InviteState, Project

# A link's token: the selector (16 hex digits) that finds the row, a dash, the secret
# (64 hex digits, 256 random bits). Hex, so no mail program breaks the link at a character.
SELECTOR_HEX = 16
SECRET_HEX = 64
TOKEN_RE = re.compile(rf"([0-9a-f]{{{SELECTOR_HEX}}})-([0-9a-f]{{{SECRET_HEX}}})")
# Compared against when no row has the selector, so a miss costs what a hit does.
_NO_HASH = "0" * 64


def invite_token_hash(secret: str) -> str:
    """What is stored of a link's secret: its SHA-256, in hex. The secret is 256 random
    bits, so a fast hash is enough: there is nothing to guess from it."""
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def invite_token_read(text: str) -> str | None:
    """The token in what a person has: the whole link (the token follows its ``#``) or
    the token alone; None when there is none."""
    candidate = text.strip().rsplit("#", 1)[-1].strip().lower()
    return candidate if TOKEN_RE.fullmatch(candidate) else None


def invite_find(*, token: str) -> Invite | None:
    """The invitation a link's token opens, whatever its state; None for a token that
    opens none.

    The selector is not secret and finds the row by its index; the secret's hash is
    then compared with ``hmac.compare_digest``, also when no row matched, so how long the
    check takes says nothing about how close a guess came."""
    match = TOKEN_RE.fullmatch(token)
    selector, secret = match.groups() if match else ("", "")
    invite = (
        Invite.objects.select_related("project", "user", "invited_by")
        .filter(selector=selector)
        .first()
        if match
        else None
    )
    matches = hmac.compare_digest(
        invite_token_hash(secret), invite.token_hash if invite else _NO_HASH
    )
    return invite if invite is not None and matches else None


def invite_state(invite: Invite, *, now: datetime | None = None) -> InviteState:
    """Pending until it is accepted, revoked or past ``expires_at``."""
    if invite.accepted_at is not None:
        return InviteState.ACCEPTED
    if invite.revoked_at is not None:
        return InviteState.REVOKED
    if invite.expires_at <= (now or timezone.now()):
        return InviteState.EXPIRED
    return InviteState.PENDING


def invite_list_open(*, project: Project) -> QuerySet[Invite]:
    """The project's invitations that are neither accepted nor revoked, newest first,
    each with ``state`` (pending, or expired: past its date and still to be revoked or
    replaced)."""
    return (
        Invite.objects.filter(project=project, accepted_at__isnull=True, revoked_at__isnull=True)
        .select_related("user", "invited_by")
        .annotate(
            state=Case(
                When(Q(expires_at__lte=Now()), then=Value(InviteState.EXPIRED.value)),
                default=Value(InviteState.PENDING.value),
                output_field=CharField(),
            )
        )
        .order_by("-created_at", "-id")
    )


def invite_get(*, project: Project, invite_id: int) -> Invite:
    """One of the project's invitations (any state); Http404 for another project's."""
    invite = (
        Invite.objects.select_related("user", "invited_by", "accepted_by")
        .filter(project=project, pk=invite_id)
        .first()
    )
    if invite is None:
        raise Http404("No such invitation in this project.")
    return invite
