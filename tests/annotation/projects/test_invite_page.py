"""The invitation page (/invite/) through Django's test client, on PostgreSQL: a link
opens its invitation (the token posted from the page, never in a URL), a new person sets
a username and a password and lands on the project, a signed-in one joins with their
account; a used, expired, revoked or unknown link says so on a page of its own; invalid
links are counted per address like failed sign-ins; the form is CSRF-checked; and the
token reaches no log, no session and no sign-in record."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.sessions.models import Session
from django.test import Client
from django.utils import timezone

from annotation.models import Invite, InviteState, Membership, Role
from annotation.projects.invite_lists import InviteRow
from annotation.projects.invite_reads import invite_state
from annotation.projects.invites import InviteIssued, invite_revoke, invites_create
from tests.factories import MembershipFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "a-Longer-one-42"
OFFICE = "203.0.113.9"


@pytest.fixture
def lead(project: Any) -> Any:
    return MembershipFactory(project=project, role=Role.LEAD, user__username="lena").user


def _issue(project: Any, lead: Any, **row: Any) -> InviteIssued:
    (issued,) = invites_create(
        project=project,
        invited_by=lead,
        rows=[InviteRow(line=1, **row)],
        days=7,
        link_base="http://testserver/invite/",
    )
    return issued


def _token(issued: InviteIssued) -> str:
    return issued.link.split("#", 1)[1]


def _open(client: Client, token: str, address: str = OFFICE) -> Any:
    return client.post("/invite/", {"action": "open", "token": token}, REMOTE_ADDR=address)


def _signup(client: Client, username: str = "ann", password: str = PASSWORD, **extra: Any) -> Any:
    data = {"action": "accept", "username": username, "password1": password, "password2": password}
    return client.post("/invite/", {**data, **extra}, REMOTE_ADDR=OFFICE)


def test_a_new_person_sets_a_password_and_lands_on_the_project(project: Any, lead: Any) -> None:
    issued = _issue(project, lead, email="ann@lab.example", name="Ann Lee")
    client = Client()
    # The link's page, before the script posts the token: a form to open it
    page = client.get("/invite/")
    assert page.status_code == 200 and b'id="invite-open"' in page.content
    assert page["Cache-Control"].startswith("max-age=0")
    # The token, posted: the invitation goes into the session, the browser comes back
    opened = _open(client, _token(issued))
    assert (opened.status_code, opened["Location"]) == (302, "/invite/")
    shown = client.get("/invite/")
    assert shown.status_code == 200
    text = shown.content.decode()
    assert f"Join {project.name}" in text and "lena invites you" in text
    assert "as <strong>Annotator</strong>" in text and "for ann@lab.example" in text
    assert 'name="password1"' in text and "Your password must contain at least 8" in text
    # Accepting makes the account, signs it in and lands on the project with a welcome
    landed = _signup(client, username="ann")
    assert (landed.status_code, landed["Location"]) == (302, f"/projects/{project.pk}/")
    member = Membership.objects.get(project=project, user__username="ann")
    assert member.role == Role.ANNOTATOR and member.user.email == "ann@lab.example"
    assert int(client.session["_auth_user_id"]) == member.user.pk
    overview = client.get(landed["Location"])
    assert overview.status_code == 200
    assert f"Welcome, ann: you joined {project.name} as Annotator." in overview.content.decode()
    # The link is spent
    client.post("/logout/")
    again = Client()
    _open(again, _token(issued))
    used = again.get("/invite/")
    assert used.status_code == 410 and b"This invitation has been used" in used.content


def test_a_bad_password_is_said_beside_its_field_and_changes_nothing(
    project: Any, lead: Any
) -> None:
    issued = _issue(project, lead, email="ann@lab.example")
    client = Client()
    _open(client, _token(issued))
    for password, error in (
        ("short1", "This password is too short."),
        ("password123", "This password is too common."),
        ("ann@lab.example", "The password is too similar to the email address."),
    ):
        refused = _signup(client, password=password)
        assert refused.status_code == 400
        assert error in refused.content.decode()
    mismatch = client.post(
        "/invite/",
        {"action": "accept", "username": "ann", "password1": PASSWORD, "password2": PASSWORD + "x"},
    )
    assert mismatch.status_code == 400 and "didn’t match" in mismatch.content.decode()
    taken = _signup(client, username="LENA")
    assert "A user with that username already exists." in taken.content.decode()
    assert not Membership.objects.filter(project=project).exclude(user=lead).exists()
    assert invite_state(Invite.objects.get()) == InviteState.PENDING
    assert _signup(client).status_code == 302


def test_a_signed_in_person_joins_with_their_account(project: Any, lead: Any) -> None:
    bob = UserFactory(username="bob")
    issued = _issue(project, lead, email="bob@lab.example", role=Role.ML)
    client = Client()
    client.force_login(bob)
    _open(client, _token(issued))
    page = client.get("/invite/").content.decode()
    assert "You are signed in as <strong>bob</strong>" in page and "Join as ML staff" in page
    joined = client.post("/invite/", {"action": "accept"})
    assert joined["Location"] == f"/projects/{project.pk}/"
    assert Membership.objects.get(project=project, user=bob).role == Role.ML


def test_an_invitation_for_an_account_asks_for_its_sign_in_and_comes_back(
    project: Any, lead: Any
) -> None:
    carol = UserFactory(username="carol")
    issued = _issue(project, lead, username="carol", role=Role.LEAD)
    client = Client()
    _open(client, _token(issued))
    page = client.get("/invite/").content.decode()
    assert "for the account <strong>carol</strong>" in page and "/login/?next=/invite/" in page
    # A new account cannot take it
    refused = _signup(client, username="mallory")
    assert refused.status_code == 400 and not Membership.objects.filter(user__username="mallory")
    # Signing in as carol comes back to the invitation, still open in the session
    signed_in = client.post(
        "/login/?next=/invite/", {"username": "carol", "password": "pass-1234", "next": "/invite/"}
    )
    assert signed_in["Location"] == "/invite/"
    assert "Join as Project lead" in client.get("/invite/").content.decode()
    client.post("/invite/", {"action": "accept"})
    assert Membership.objects.get(project=project, user=carol).role == Role.LEAD


def test_someone_signed_in_as_another_account_is_told_and_not_let_in(
    project: Any, lead: Any
) -> None:
    UserFactory(username="carol")
    issued = _issue(project, lead, username="carol")
    client = Client()
    client.force_login(UserFactory(username="dave"))
    _open(client, _token(issued))
    page = client.get("/invite/").content.decode()
    assert "You are signed in as dave: log out" in page
    refused = client.post("/invite/", {"action": "accept"})
    assert refused.status_code == 400
    assert "This invitation is for the account carol" in refused.content.decode()
    assert not Membership.objects.filter(project=project, user__username="dave").exists()


def test_a_member_opening_an_invitation_is_told_and_leaves_it_open(project: Any, lead: Any) -> None:
    issued = _issue(project, lead, email="ann@lab.example")
    client = Client()
    client.force_login(lead)
    _open(client, _token(issued))
    page = client.get("/invite/").content.decode()
    assert "You are already a member" in page and "Join as" not in page
    client.post("/invite/", {"action": "accept"})
    assert Membership.objects.get(project=project, user=lead).role == Role.LEAD
    assert invite_state(Invite.objects.get()) == InviteState.PENDING


@pytest.mark.parametrize(
    ("state", "status", "heading"),
    [
        ("expired", 410, "This invitation has expired"),
        ("revoked", 410, "This invitation was withdrawn"),
        ("accepted", 410, "This invitation has been used"),
    ],
)
def test_a_dead_link_says_why_and_never_errs(
    project: Any, lead: Any, state: str, status: int, heading: str
) -> None:
    issued = _issue(project, lead, email="ann@lab.example")
    client = Client()
    _open(client, _token(issued))
    # It dies after it was opened, before it is accepted
    if state == "expired":
        Invite.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    elif state == "revoked":
        invite_revoke(invite=issued.invite, revoked_by=lead)
    else:
        Invite.objects.update(accepted_at=timezone.now())
    page = client.get("/invite/")
    assert page.status_code == status and heading in page.content.decode()
    accept = _signup(client)
    assert accept.status_code == status and heading in accept.content.decode()
    assert not Membership.objects.filter(user__username="ann").exists()
    # Opened afresh, the same
    fresh = Client()
    assert _open(fresh, _token(issued)).status_code == 302
    assert fresh.get("/invite/").status_code == status


def test_an_unknown_link_says_it_is_not_valid(project: Any, lead: Any) -> None:
    issued = _issue(project, lead, email="ann@lab.example")
    token = _token(issued)
    client = Client()
    for wrong in (token[:-1] + ("0" if token[-1] != "0" else "1"), "nonsense", token[:40]):
        page = _open(client, wrong)
        assert page.status_code == 404
        assert "This invitation link is not valid" in page.content.decode()
    assert client.get("/invite/").status_code == 200  # nothing opened: the form again
    blank = _open(client, "   ")
    assert blank.status_code == 200 and "Paste the link" in blank.content.decode()


def test_the_whole_link_pasted_into_the_form_opens_it(project: Any, lead: Any) -> None:
    issued = _issue(project, lead, email="ann@lab.example")
    client = Client()
    assert _open(client, f"  {issued.link}\n").status_code == 302
    assert "Join" in client.get("/invite/").content.decode()


def test_opening_a_second_link_replaces_the_first(project: Any, lead: Any) -> None:
    first = _issue(project, lead, email="ann@lab.example")
    other = ProjectFactory(name="Other project")
    second = _issue(other, MembershipFactory(project=other, role=Role.LEAD).user, email="x@y.org")
    client = Client()
    _open(client, _token(first))
    _open(client, _token(second))
    assert "Join Other project" in client.get("/invite/").content.decode()
    _signup(client)
    assert list(
        Membership.objects.filter(user__username="ann").values_list("project", flat=True)
    ) == [other.pk]


def test_posted_fields_cannot_pick_another_project_or_role(project: Any, lead: Any) -> None:
    other = ProjectFactory()
    issued = _issue(project, lead, email="ann@lab.example")
    client = Client()
    _open(client, _token(issued))
    _signup(client, project=str(other.pk), project_id=str(other.pk), role="lead", is_staff="on")
    (membership,) = Membership.objects.filter(user__username="ann")
    assert (membership.project_id, membership.role) == (project.pk, Role.ANNOTATOR)
    assert not membership.user.is_staff


def test_a_few_invalid_links_do_not_lock_a_lab_out_of_its_invitations(
    project: Any, lead: Any
) -> None:
    # Given: people behind one office address who mistype or half-paste their links, as
    # many times as would lock an account
    issued = _issue(project, lead, email="ann@lab.example")
    codes = [
        _open(Client(), f"{i:016x}-{'0' * 64}").status_code
        for i in range(settings.AXES_FAILURE_LIMIT + 2)
    ]
    assert set(codes) == {404}
    # Then: the next person at that address still opens a real link
    assert _open(Client(), _token(issued)).status_code == 302


def test_invalid_links_are_counted_per_address_like_failed_sign_ins(
    project: Any, lead: Any, settings: Any
) -> None:
    # Given: a small bound on invalid links per address
    settings.STEPLAB_INVITE_LINK_FAILURE_LIMIT = 12
    issued = _issue(project, lead, email="ann@lab.example")
    limit = settings.STEPLAB_INVITE_LINK_FAILURE_LIMIT
    guesses = [f"{i:016x}-{'0' * 64}" for i in range(limit + 2)]
    codes = [_open(Client(), guess).status_code for guess in guesses]
    # Up to the limit each says the link is not valid; then the address is refused
    assert codes == [404] * (limit - 1) + [429] * 3
    locked = _open(Client(), _token(issued))
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    assert "Too many invitation links that open nothing" in locked.content.decode()
    # Another address opens the real link; a dead but real link is no guess
    assert _open(Client(), _token(issued), address="198.51.100.4").status_code == 302
    # What axes keeps of the attempts holds no token
    kept = " ".join(f"{a.username} {a.post_data} {a.get_data}" for a in AccessAttempt.objects.all())
    assert kept and all(guess not in kept for guess in guesses)
    assert f"invite-link:{OFFICE}" in kept


def test_the_forms_are_csrf_checked(project: Any, lead: Any) -> None:
    issued = _issue(project, lead, email="ann@lab.example")
    client = Client(enforce_csrf_checks=True)
    assert _open(client, _token(issued)).status_code == 403
    page = client.get("/invite/")
    csrf = page.cookies["csrftoken"].value
    opened = client.post(
        "/invite/", {"action": "open", "token": _token(issued), "csrfmiddlewaretoken": csrf}
    )
    assert opened.status_code == 302
    forged = client.post(
        "/invite/",
        {"action": "accept", "username": "ann", "password1": PASSWORD, "password2": PASSWORD},
    )
    assert forged.status_code == 403
    assert not Membership.objects.filter(user__username="ann").exists()


def test_the_token_reaches_no_log_session_or_sign_in_record(
    project: Any, lead: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # Invited through the API (the lead's session), e-mailed, opened, a wrong try, accepted
    client = Client()
    client.force_login(lead)
    body = client.post(
        f"/api/v1/projects/{project.pk}/invites/",
        {"email": "ann@lab.example", "role": "annotator"},
        content_type="application/json",
    ).json()
    token = body["link"].split("#", 1)[1]
    secret = token.split("-")[1]
    visitor = Client()
    _open(visitor, token[:-1] + ("0" if token[-1] != "0" else "1"))
    _open(visitor, token)
    stored = Session.objects.get(session_key=visitor.session.session_key).get_decoded()
    _signup(visitor)
    assert Membership.objects.filter(user__username="ann").exists()
    logged = "\n".join(
        f"{record.getMessage()} {record.args!r} {getattr(record, 'request', '')!r}"
        for record in caplog.records
    )
    assert caplog.records and secret not in logged
    assert secret not in repr(stored)
    assert all(secret not in str(row) for row in AccessAttempt.objects.values())
    assert all(secret not in str(row) for row in Invite.objects.values())
