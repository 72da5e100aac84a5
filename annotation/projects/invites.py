"""Write paths for invitations: a lead invites people to a project (one, or a list whole
or not at all) and revokes an invitation; the person it is for accepts it. The members
API and page, and the invitation page, call these.

Lock order: an invitation's row, then the project's memberships (``membership_add``)."""

from __future__ import annotations

import hmac
import logging
import secrets
import smtplib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage, get_connection
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.db.models.functions import Lower
from django.template.loader import render_to_string
from django.utils import dateformat, timezone

from annotation.models import Invite, InviteState, Membership, Project, Role
from annotation.projects.invite_lists import InviteListInvalid, InviteRow, RowError
from annotation.projects.invite_reads import (
    SECRET_HEX,
    SELECTOR_HEX,
    invite_state,
    invite_token_hash,
)
from annotation.projects.services import membership_add

logger = logging.getLogger(__name__)

EMAIL_NOT_SET_UP = "E-mail is not set up on this server: send the link yourself."


@dataclass(frozen=True)
class InviteIssued:
    """A new invitation and its link. The link is known only here, once: the database
    keeps a hash of its secret."""

    invite: Invite
    link: str
    emailed: bool = False
    email_error: str = ""


@dataclass(frozen=True)
class InviteAccepted:
    membership: Membership
    user: User
    new_account: bool


class InviteUnusable(Exception):
    """The link lets nobody in; ``state`` says why: an InviteState other than pending,
    or ``unknown`` for a link no invitation has."""

    UNKNOWN = "unknown"

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.state = state


def _pending_message(invite: Invite, who: str) -> str:
    until = dateformat.format(timezone.localtime(invite.expires_at), "j M Y H:i")
    return f"{who} already has an invitation, valid until {until}: revoke it to send a new link."


def _rows_check(
    *, project: Project, rows: Sequence[InviteRow]
) -> tuple[dict[str, User], list[int]]:
    """The accounts the rows name by username, and the open invitations past their date
    that the new ones replace. Raises InviteListInvalid with every row that cannot be
    invited: an unknown or inactive account, a member already, someone with a pending
    invitation. A few queries, whatever the number of rows."""
    usernames = {row.username for row in rows if row.username}
    emails = {row.email.lower() for row in rows if row.email}
    users = {
        user.username: user
        for user in get_user_model().objects.filter(username__in=usernames, is_active=True)
    }
    members = dict(
        Membership.objects.filter(project=project, user__in=users.values()).values_list(
            "user_id", "role"
        )
    )
    member_emails = {
        email: (username, role)
        for email, username, role in Membership.objects.filter(project=project)
        .annotate(address=Lower("user__email"))
        .filter(address__in=emails)
        .values_list("address", "user__username", "role")
    }
    open_invites = (
        Invite.objects.filter(project=project, accepted_at__isnull=True, revoked_at__isnull=True)
        .annotate(address=Lower("email"))
        .filter(Q(user__in=users.values()) | Q(address__in=emails))
    )
    pending = {(invite.user_id or invite.address): invite for invite in open_invites}
    errors: list[RowError] = []
    for row in rows:
        user = users.get(row.username)
        key = user.pk if user is not None else row.email.lower()
        problem = ""
        if row.username and user is None:
            problem = f"No active account is named {row.username!r}: invite them by e-mail address."
        elif user is not None and user.pk in members:
            problem = f"{row.username} is already a member ({Role(members[user.pk]).label})."
        elif row.email and row.email.lower() in member_emails:
            username, role = member_emails[row.email.lower()]
            problem = (
                f"{row.email} is the address of {username}, already a member ({Role(role).label})."
            )
        elif key in pending and invite_state(pending[key]) == InviteState.PENDING:
            problem = _pending_message(pending[key], row.who)
        if problem:
            errors.append(RowError(line=row.line, who=row.who, message=problem))
    if errors:
        bad = len(errors)
        raise InviteListInvalid(
            f"Nobody was invited: {bad} {'person' if bad == 1 else 'people'} cannot be.", errors
        )
    # What is left open is past its date: the new invitations replace it.
    return users, [invite.pk for invite in pending.values()]


def invites_create(
    *,
    project: Project,
    invited_by: User,
    rows: Sequence[InviteRow],
    days: int,
    link_base: str,
) -> list[InviteIssued]:
    """Invite everyone in ``rows`` to the project with their row's role, valid for
    ``days``: all of them, or nobody (InviteListInvalid names every row that cannot be
    invited). An earlier invitation of the same person that expired unused is revoked by
    the new one. Each link is ``link_base#<token>``; an invitation with an address (its
    own, or its account's) is e-mailed, and the result says whether it went.

    Who may invite (the project's leads) is the caller's check. Precondition: called
    outside a transaction, so no mail announces an invitation that is rolled back."""
    if not 1 <= days <= settings.STEPLAB_INVITE_MAX_DAYS:
        raise ValidationError(
            {"expires_in_days": [f"Between 1 and {settings.STEPLAB_INVITE_MAX_DAYS} days."]}
        )
    users, replaced = _rows_check(project=project, rows=rows)
    now = timezone.now()
    invites: list[Invite] = []
    tokens: list[str] = []
    for row in rows:
        selector, secret = secrets.token_hex(SELECTOR_HEX // 2), secrets.token_hex(SECRET_HEX // 2)
        tokens.append(f"{selector}-{secret}")
        invites.append(
            Invite(
                project=project,
                role=row.role,
                email=row.email,
                user=users.get(row.username),
                name=row.name,
                selector=selector,
                token_hash=invite_token_hash(secret),
                invited_by=invited_by,
                expires_at=now + timedelta(days=days),
            )
        )
    try:
        with transaction.atomic():
            Invite.objects.filter(pk__in=replaced).update(revoked_at=now, revoked_by=invited_by)
            Invite.objects.bulk_create(invites)
    except IntegrityError as exc:
        # The partial unique constraints: another lead invited one of them meanwhile.
        raise InviteListInvalid(
            "Someone else invited one of these people at the same moment: nobody was "
            "invited. Send the list again to see who."
        ) from exc
    issued = [
        InviteIssued(invite=invite, link=f"{link_base}#{token}")
        for invite, token in zip(invites, tokens, strict=True)
    ]
    return _invites_email(issued=issued)


def _mail_error(exc: Exception) -> str:
    """Why a message did not go, for the lead (never the message itself)."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return "Not sent: the mail server refused the address."
    return f"Not sent ({type(exc).__name__}): {exc}"[:300]


def _address(invite: Invite) -> str:
    return invite.email or (invite.user.email if invite.user is not None else "")


def _message(item: InviteIssued, *, address: str) -> EmailMessage:
    invite = item.invite
    inviter = invite.invited_by
    context = {
        "project": invite.project.name,
        "role": Role(invite.role).label,
        "inviter": (inviter.get_full_name() or inviter.get_username()) if inviter else "",
        "name": invite.name,
        "link": item.link,
        "expires_at": invite.expires_at,
        "for_account": invite.user.get_username() if invite.user is not None else "",
    }
    subject = render_to_string("annotation/email/invite_subject.txt", context)
    body = render_to_string("annotation/email/invite_body.txt", context)
    return EmailMessage(subject=" ".join(subject.split()), body=body, to=[address])


def _invites_email(*, issued: list[InviteIssued]) -> list[InviteIssued]:
    """Each invitation with an address e-mailed through Django's backend, over one
    connection. A message that fails is reported on its invitation, which stays: the
    lead still has its link. Only the invitation's id and the error's kind are logged
    (never the link)."""
    if not any(_address(item.invite) for item in issued):
        return issued
    if not settings.STEPLAB_EMAIL_ENABLED:
        return [
            replace(item, email_error=EMAIL_NOT_SET_UP) if _address(item.invite) else item
            for item in issued
        ]
    sent: list[InviteIssued] = []
    connection = get_connection()
    try:
        connection.open()
    except Exception as exc:  # whatever the backend raises, the invitations stand
        logger.warning("Invitation e-mail: no connection (%s)", type(exc).__name__)
        return [
            replace(item, email_error=_mail_error(exc)) if _address(item.invite) else item
            for item in issued
        ]
    try:
        for item in issued:
            address = _address(item.invite)
            if not address:
                sent.append(item)
                continue
            try:
                connection.send_messages([_message(item, address=address)])
                sent.append(replace(item, emailed=True))
            except Exception as exc:  # one refused address must not stop the others
                logger.warning(
                    "Invitation %s: e-mail not sent (%s)", item.invite.pk, type(exc).__name__
                )
                sent.append(replace(item, email_error=_mail_error(exc)))
    finally:
        connection.close()
    return sent


def invite_revoke(*, invite: Invite, revoked_by: User) -> Invite:
    """Withdraw an invitation: its link lets nobody in from now on. Revoking a revoked
    one changes nothing; an accepted one is refused (remove the member instead)."""
    with transaction.atomic():
        locked = Invite.objects.select_for_update().get(pk=invite.pk)
        if locked.accepted_at is not None:
            raise ValidationError(
                {"invite": ["This invitation was accepted: remove the member instead."]}
            )
        if locked.revoked_at is None:
            locked.revoked_at = timezone.now()
            locked.revoked_by = revoked_by
            locked.save(update_fields=["revoked_at", "revoked_by"])
    return locked


def _account_create(*, username: str, password: str, invite: Invite) -> User:
    """A new account for the person an e-mail invitation was sent to, with the password
    they chose (Django's password validators). Precondition: inside the transaction
    that accepts the invitation."""
    user_model = get_user_model()
    user = user_model(username=username, email=invite.email, first_name=invite.name)
    try:
        user.full_clean(exclude=["password"])
    except ValidationError as exc:
        problems = exc.message_dict.get("username", exc.messages)
        raise ValidationError({"username": problems}) from None
    if user_model.objects.filter(username__iexact=username).exists():
        raise ValidationError({"username": ["A user with that username already exists."]})
    try:
        validate_password(password, user=user)
    except ValidationError as exc:
        raise ValidationError({"password": exc.messages}) from None
    user.set_password(password)
    try:
        with transaction.atomic():
            user.save()
    except IntegrityError:
        raise ValidationError({"username": ["A user with that username already exists."]}) from None
    return user


def invite_accept(
    *,
    invite_id: int,
    token_hash: str,
    user: User | None,
    username: str = "",
    password: str = "",
) -> InviteAccepted:
    """Accept an invitation: ``user`` (signed in) joins the project with its role, or,
    with no user, a new account named ``username`` with ``password`` is made and joins.

    The invitation's row is locked FOR UPDATE and its state read under the lock, so of
    two acceptances at once one wins and the other finds it accepted (InviteUnusable).
    ``token_hash`` is the hash of the secret of the link the person opened
    (``invite_find``), compared again here in constant time: only that link accepts, and
    only into the invitation's own project with its own role. Refused, changing
    nothing: an account other than the one an invitation names, and someone who is
    already a member (the invitation stays for the person it was sent to)."""
    with transaction.atomic():
        invite = (
            Invite.objects.select_for_update(of=("self",))
            .select_related("project", "user")
            .filter(pk=invite_id)
            .first()
        )
        if invite is None or not hmac.compare_digest(invite.token_hash, token_hash):
            raise InviteUnusable(InviteUnusable.UNKNOWN)
        state = invite_state(invite)
        if state != InviteState.PENDING:
            raise InviteUnusable(state)
        if invite.user is not None and (user is None or user.pk != invite.user.pk):
            raise ValidationError(
                f"This invitation is for the account {invite.user.get_username()}: "
                "sign in with it to accept."
            )
        new_account = user is None
        if user is None:
            if not settings.STEPLAB_LOCAL_PASSWORDS:
                # Accounts come from the identity provider (annotation/sso.py): a password
                # account made here could never sign in.
                raise ValidationError(
                    "Accounts here come from single sign-on: sign in with it, then open "
                    "the link again to join."
                )
            user = _account_create(username=username, password=password, invite=invite)
        elif Membership.objects.filter(project=invite.project, user=user).exists():
            raise ValidationError(
                f"You are already a member of {invite.project.name}. The invitation is "
                "left for the person it was sent to."
            )
        membership, _ = membership_add(project=invite.project, user=user, role=invite.role)
        invite.accepted_at = timezone.now()
        invite.accepted_by = user
        invite.save(update_fields=["accepted_at", "accepted_by"])
    return InviteAccepted(membership=membership, user=user, new_account=new_account)
