"""The invitation services on PostgreSQL: inviting (one, or a list whole or not at all),
the link's token kept only as a hash, e-mail through Django's backend, revoking, and
accepting (a new account with Django's password validators, or a signed-in one), once
and into the invitation's own project only, also when two people accept at once."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, connections, transaction
from django.utils import timezone

from annotation.models import Invite, InviteState, Membership, Role
from annotation.projects.invite_lists import InviteListInvalid, InviteRow
from annotation.projects.invite_reads import (
    invite_find,
    invite_list_open,
    invite_state,
    invite_token_hash,
)
from annotation.projects.invites import (
    EMAIL_NOT_SET_UP,
    InviteIssued,
    InviteUnusable,
    invite_accept,
    invite_revoke,
    invites_create,
)
from tests.factories import MembershipFactory, ProjectFactory, UserFactory

LINK_BASE = "https://steplab.example/invite/"
PASSWORD = "a-Longer-one-42"


def _invite(project: Any, lead: Any, *rows: InviteRow, days: int = 7) -> list[InviteIssued]:
    return invites_create(
        project=project, invited_by=lead, rows=list(rows), days=days, link_base=LINK_BASE
    )


def _token(issued: InviteIssued) -> str:
    return issued.link.split("#", 1)[1]


@pytest.fixture
def lead(project: Any) -> Any:
    return MembershipFactory(project=project, role=Role.LEAD, user__username="lena").user


@pytest.mark.django_db
def test_an_invitation_keeps_only_a_hash_of_its_link(project: Any, lead: Any) -> None:
    # When: a lead invites someone by address
    (issued,) = _invite(project, lead, InviteRow(line=1, email="ann@lab.example"))
    # Then: the link is the page's address with the token after '#'
    token = _token(issued)
    assert issued.link == f"{LINK_BASE}#{token}"
    selector, secret = token.split("-")
    assert (len(selector), len(secret)) == (16, 64)
    # And: the row holds the selector and the secret's SHA-256, never the secret
    invite = Invite.objects.get()
    assert invite.selector == selector
    assert invite.token_hash == invite_token_hash(secret) != secret
    row = Invite.objects.filter(pk=invite.pk).values().get()
    assert not any(secret in str(value) for value in row.values())
    # And: the token finds it; a token one digit off does not
    assert invite_find(token=token) == invite
    wrong = token[:-1] + ("0" if token[-1] != "0" else "1")
    assert invite_find(token=wrong) is None
    assert invite_find(token="0" * 16 + "-" + secret) is None
    assert invite_state(invite) == InviteState.PENDING
    assert invite.expires_at - invite.created_at == pytest.approx(
        timedelta(days=7), abs=timedelta(seconds=5)
    )


@pytest.mark.django_db
def test_the_link_is_emailed_with_the_project_role_and_inviter(project: Any, lead: Any) -> None:
    lead.first_name, lead.last_name = "Lena", "Ruiz"
    lead.save()
    (issued,) = _invite(
        project, lead, InviteRow(line=1, email="ann@lab.example", role=Role.LEAD, name="Ann")
    )
    assert issued.emailed and issued.email_error == ""
    (message,) = mail.outbox
    assert message.to == ["ann@lab.example"]
    assert message.subject == f"Lena Ruiz invites you to {project.name} on Steplab"
    assert issued.link in message.body
    assert "Hello Ann," in message.body and "as Project lead" in message.body


@pytest.mark.django_db
def test_an_invitation_by_username_is_for_that_account_and_mailed_to_its_address(
    project: Any, lead: Any
) -> None:
    carol = UserFactory(username="carol", email="carol@lab.example")
    (issued,) = _invite(project, lead, InviteRow(line=1, username="carol", role=Role.ML))
    assert issued.invite.user == carol and issued.invite.email == ""
    assert issued.emailed and mail.outbox[0].to == ["carol@lab.example"]
    assert "join with your account carol" in mail.outbox[0].body


@pytest.mark.django_db
def test_without_a_mail_server_the_invitation_stands_and_says_so(
    project: Any, lead: Any, settings: Any
) -> None:
    settings.STEPLAB_EMAIL_ENABLED = False
    (issued,) = _invite(project, lead, InviteRow(line=1, email="ann@lab.example"))
    assert (issued.emailed, issued.email_error) == (False, EMAIL_NOT_SET_UP)
    assert mail.outbox == []
    assert Invite.objects.count() == 1


@pytest.mark.django_db
def test_a_refused_message_is_reported_on_its_invitation_and_the_others_go(
    project: Any, lead: Any, settings: Any
) -> None:
    settings.EMAIL_BACKEND = "tests.annotation.projects.refusing_mail.RefusingBackend"
    issued = _invite(
        project,
        lead,
        InviteRow(line=1, email="ann@lab.example"),
        InviteRow(line=2, email="refused@lab.example"),
        InviteRow(line=3, email="bob@lab.example"),
    )
    assert [(i.emailed, i.email_error) for i in issued] == [
        (True, ""),
        (False, "Not sent: the mail server refused the address."),
        (True, ""),
    ]
    assert Invite.objects.count() == 3


@pytest.mark.django_db
def test_an_unreachable_mail_server_leaves_every_link_to_copy(
    project: Any, lead: Any, settings: Any
) -> None:
    settings.EMAIL_BACKEND = "tests.annotation.projects.refusing_mail.UnreachableBackend"
    issued = _invite(
        project,
        lead,
        InviteRow(line=1, email="ann@lab.example"),
        InviteRow(line=2, username=UserFactory(email="").username),
    )
    assert [(i.emailed, i.email_error) for i in issued] == [
        (False, "Not sent (ConnectionRefusedError): [Errno 111] Connection refused"),
        (False, ""),  # an account with no address: nothing to send
    ]
    assert all(i.link.startswith(LINK_BASE + "#") for i in issued)


@pytest.mark.django_db
def test_a_list_is_invited_whole_or_not_at_all(project: Any, lead: Any) -> None:
    # Given: a member, a pending invitation and an account
    MembershipFactory(project=project, user__username="mia", user__email="Mia@Lab.example")
    _invite(project, lead, InviteRow(line=1, email="pending@lab.example"))
    UserFactory(username="inactive", is_active=False)
    mail.outbox.clear()
    rows = [
        InviteRow(line=1, email="new@lab.example"),
        InviteRow(line=2, username="ghost"),
        InviteRow(line=3, username="mia"),
        InviteRow(line=4, email="mia@lab.example"),
        InviteRow(line=5, email="PENDING@lab.example"),
        InviteRow(line=6, username="inactive"),
    ]
    # When: a list holds five people who cannot be invited
    with pytest.raises(InviteListInvalid) as caught:
        _invite(project, lead, *rows)
    # Then: each is named with its line, and nobody was invited or mailed
    errors = {error.line: error.message for error in caught.value.errors}
    assert sorted(errors) == [2, 3, 4, 5, 6]
    assert errors[2] == "No active account is named 'ghost': invite them by e-mail address."
    assert errors[3] == "mia is already a member (Annotator)."
    assert errors[4] == "mia@lab.example is the address of mia, already a member (Annotator)."
    assert errors[5].startswith("PENDING@lab.example already has an invitation, valid until")
    assert "revoke it to send a new link" in errors[5]
    assert Invite.objects.count() == 1 and mail.outbox == []


@pytest.mark.django_db
def test_an_expired_invitation_is_replaced_by_a_new_one(project: Any, lead: Any) -> None:
    (old,) = _invite(project, lead, InviteRow(line=1, email="ann@lab.example"))
    Invite.objects.filter(pk=old.invite.pk).update(expires_at=timezone.now() - timedelta(hours=1))
    assert [i.state for i in invite_list_open(project=project)] == ["expired"]
    (new,) = _invite(project, lead, InviteRow(line=1, email="Ann@lab.example"), days=1)
    old.invite.refresh_from_db()
    assert invite_state(old.invite) == InviteState.REVOKED
    assert old.invite.revoked_by == lead
    assert [i.pk for i in invite_list_open(project=project)] == [new.invite.pk]


@pytest.mark.django_db
@pytest.mark.parametrize("days", [0, 31])
def test_the_span_of_a_link_is_bounded(project: Any, lead: Any, days: int) -> None:
    with pytest.raises(ValidationError) as caught:
        _invite(project, lead, InviteRow(line=1, email="ann@lab.example"), days=days)
    assert "expires_in_days" in caught.value.message_dict
    assert not Invite.objects.exists()


@pytest.mark.django_db
def test_one_open_invitation_a_person_is_held_by_the_database(project: Any, lead: Any) -> None:
    _invite(project, lead, InviteRow(line=1, email="ann@lab.example"))
    # A second row past the service's own check (two leads at once) is refused by the
    # partial unique index, whatever the case of the address.
    clone = Invite.objects.values().get()
    clone.update(id=None, email="ANN@lab.example", selector="f" * 16)
    with pytest.raises(IntegrityError, match="invite_open_email_unique"), transaction.atomic():
        Invite.objects.create(**clone)


@pytest.mark.django_db
def test_a_new_person_accepts_with_a_username_and_password(project: Any, lead: Any) -> None:
    (issued,) = _invite(project, lead, InviteRow(line=1, email="ann@lab.example", name="Ann Lee"))
    invite = invite_find(token=_token(issued))
    assert invite is not None
    accepted = invite_accept(
        invite_id=invite.pk,
        token_hash=invite.token_hash,
        user=None,
        username="ann",
        password=PASSWORD,
    )
    assert accepted.new_account
    user = accepted.user
    assert (user.username, user.email, user.first_name) == ("ann", "ann@lab.example", "Ann Lee")
    assert user.check_password(PASSWORD) and not user.is_staff
    assert Membership.objects.get(user=user).project == project
    assert accepted.membership.role == Role.ANNOTATOR
    invite.refresh_from_db()
    assert invite_state(invite) == InviteState.ACCEPTED and invite.accepted_by == user
    # The link is spent: a second acceptance, by anyone, is refused
    with pytest.raises(InviteUnusable) as caught:
        invite_accept(invite_id=invite.pk, token_hash=invite.token_hash, user=UserFactory())
    assert caught.value.state == InviteState.ACCEPTED
    assert Membership.objects.filter(project=project).count() == 2


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("username", "password", "field", "message"),
    [
        ("ann", "short", "password", "This password is too short."),
        ("ann", "password123", "password", "This password is too common."),
        ("ann", "48151623429", "password", "This password is entirely numeric."),
        ("ann", "ann@lab.example", "password", "The password is too similar"),
        ("taken", PASSWORD, "username", "A user with that username already exists."),
        ("TAKEN", PASSWORD, "username", "A user with that username already exists."),
        ("has space", PASSWORD, "username", "Enter a valid username."),
        ("", PASSWORD, "username", "This field cannot be blank."),
    ],
)
def test_a_bad_username_or_password_changes_nothing(
    project: Any, lead: Any, username: str, password: str, field: str, message: str
) -> None:
    UserFactory(username="taken")
    (issued,) = _invite(project, lead, InviteRow(line=1, email="ann@lab.example"))
    users = get_user_model().objects.count()
    with pytest.raises(ValidationError) as caught:
        invite_accept(
            invite_id=issued.invite.pk,
            token_hash=issued.invite.token_hash,
            user=None,
            username=username,
            password=password,
        )
    assert any(m.startswith(message) for m in caught.value.message_dict[field])
    assert get_user_model().objects.count() == users
    issued.invite.refresh_from_db()
    assert invite_state(issued.invite) == InviteState.PENDING


@pytest.mark.django_db
def test_a_signed_in_person_joins_with_their_account(project: Any, lead: Any) -> None:
    bob = UserFactory(username="bob")
    (issued,) = _invite(project, lead, InviteRow(line=1, email="bob@lab.example", role=Role.ML))
    accepted = invite_accept(
        invite_id=issued.invite.pk, token_hash=issued.invite.token_hash, user=bob
    )
    assert not accepted.new_account and accepted.user == bob
    assert Membership.objects.get(project=project, user=bob).role == Role.ML


@pytest.mark.django_db
def test_an_invitation_for_an_account_is_accepted_by_that_account_only(
    project: Any, lead: Any
) -> None:
    carol = UserFactory(username="carol")
    (issued,) = _invite(project, lead, InviteRow(line=1, username="carol"))
    for other in (UserFactory(), None):
        with pytest.raises(ValidationError, match="for the account carol"):
            invite_accept(
                invite_id=issued.invite.pk,
                token_hash=issued.invite.token_hash,
                user=other,
                username="someone",
                password=PASSWORD,
            )
    assert not Membership.objects.filter(project=project).exclude(user=lead).exists()
    invite_accept(invite_id=issued.invite.pk, token_hash=issued.invite.token_hash, user=carol)
    assert Membership.objects.filter(project=project, user=carol).exists()


@pytest.mark.django_db
def test_a_member_who_opens_an_invitation_leaves_it_for_its_person(project: Any, lead: Any) -> None:
    (issued,) = _invite(project, lead, InviteRow(line=1, email="ann@lab.example"))
    # The lead opens the link themselves: their role stays, the link stays pending
    with pytest.raises(ValidationError, match="already a member"):
        invite_accept(invite_id=issued.invite.pk, token_hash=issued.invite.token_hash, user=lead)
    assert Membership.objects.get(project=project, user=lead).role == Role.LEAD
    issued.invite.refresh_from_db()
    assert invite_state(issued.invite) == InviteState.PENDING


@pytest.mark.django_db
def test_a_link_grants_its_own_project_and_role_only(project: Any, lead: Any) -> None:
    # Given: the lead of P also leads Q, and invites ann to P as an annotator
    other = ProjectFactory()
    MembershipFactory(project=other, user=lead, role=Role.LEAD)
    (issued,) = _invite(project, lead, InviteRow(line=1, email="ann@lab.example"))
    (elsewhere,) = _invite(other, lead, InviteRow(line=1, email="x@lab.example", role=Role.LEAD))
    # When: P's invitation is accepted with Q's invitation's hash, or Q's id with P's hash
    for invite_id, token_hash in (
        (issued.invite.pk, elsewhere.invite.token_hash),
        (elsewhere.invite.pk, issued.invite.token_hash),
    ):
        with pytest.raises(InviteUnusable):
            invite_accept(
                invite_id=invite_id,
                token_hash=token_hash,
                user=None,
                username="ann",
                password=PASSWORD,
            )
    # Then: only the matching pair lets ann in: into P, as an annotator, nowhere else
    accepted = invite_accept(
        invite_id=issued.invite.pk,
        token_hash=issued.invite.token_hash,
        user=None,
        username="ann",
        password=PASSWORD,
    )
    assert list(Membership.objects.filter(user=accepted.user).values_list("project", "role")) == [
        (project.pk, Role.ANNOTATOR)
    ]


@pytest.mark.django_db
def test_expired_and_revoked_links_let_nobody_in(project: Any, lead: Any) -> None:
    expired, revoked = _invite(
        project,
        lead,
        InviteRow(line=1, email="late@lab.example"),
        InviteRow(line=2, email="gone@lab.example"),
    )
    Invite.objects.filter(pk=expired.invite.pk).update(expires_at=timezone.now())
    invite_revoke(invite=revoked.invite, revoked_by=lead)
    invite_revoke(invite=revoked.invite, revoked_by=lead)  # again: nothing changes
    for issued, state in ((expired, InviteState.EXPIRED), (revoked, InviteState.REVOKED)):
        with pytest.raises(InviteUnusable) as caught:
            invite_accept(
                invite_id=issued.invite.pk,
                token_hash=issued.invite.token_hash,
                user=UserFactory(),
            )
        assert caught.value.state == state
    assert Membership.objects.filter(project=project).count() == 1


@pytest.mark.django_db
def test_an_accepted_invitation_cannot_be_revoked(project: Any, lead: Any) -> None:
    (issued,) = _invite(project, lead, InviteRow(line=1, email="ann@lab.example"))
    invite_accept(
        invite_id=issued.invite.pk, token_hash=issued.invite.token_hash, user=UserFactory()
    )
    with pytest.raises(ValidationError, match="remove the member instead"):
        invite_revoke(invite=issued.invite, revoked_by=lead)


def _waiting_on_a_lock(count: int, timeout: float = 10.0) -> bool:
    """Whether ``count`` other sessions are waiting on a row lock (PostgreSQL)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connections["default"].cursor() as cursor:
            # pg_stat_activity is read once a transaction unless the snapshot is dropped.
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            if cursor.fetchone()[0] >= count:
                return True
        time.sleep(0.05)
    return False


@pytest.mark.django_db(transaction=True)
def test_two_acceptances_at_once_one_wins() -> None:
    # Given: one invitation
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    (issued,) = _invite(project, lead, InviteRow(line=1, email="ann@lab.example"))
    results: dict[str, Any] = {}

    def accept(username: str) -> None:
        try:
            results[username] = invite_accept(
                invite_id=issued.invite.pk,
                token_hash=issued.invite.token_hash,
                user=None,
                username=username,
                password=PASSWORD,
            )
        except Exception as exc:
            results[username] = exc
        finally:
            connection.close()

    # When: two people accept it at the same moment (both held at the invitation's row
    # until this test lets go of it, so both are past every check before either writes)
    threads = [threading.Thread(target=accept, args=(name,)) for name in ("first", "second")]
    with transaction.atomic():
        Invite.objects.select_for_update().get(pk=issued.invite.pk)
        for thread in threads:
            thread.start()
        both_waited = _waiting_on_a_lock(2, timeout=5.0)
    for thread in threads:
        thread.join(timeout=30)
    # Then: one account joined, the other acceptance found the link used
    assert both_waited, "the acceptances did not wait for the invitation's row lock"
    won = [r for r in results.values() if not isinstance(r, Exception)]
    lost = [r for r in results.values() if isinstance(r, Exception)]
    assert len(won) == 1 and len(lost) == 1, results
    assert isinstance(lost[0], InviteUnusable) and lost[0].state == InviteState.ACCEPTED
    assert Membership.objects.filter(project=project, role=Role.ANNOTATOR).count() == 1
    assert get_user_model().objects.filter(username__in=["first", "second"]).count() == 1
