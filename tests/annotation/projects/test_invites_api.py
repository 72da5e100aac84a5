"""The invitations API on PostgreSQL: a lead invites one person or a list (whole or not
at all, every bad line named), reads the open invitations and revokes one. Who may call
each endpoint is in tests/test_security_matrix.py; here, what they answer."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.models import Invite, InviteState, Membership, Role
from annotation.projects.invite_lists import MAX_LIST_CHARS
from annotation.projects.invite_reads import invite_find, invite_state
from annotation.projects.invites import invite_accept
from tests.factories import MembershipFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def lead(project: Any) -> Any:
    return MembershipFactory(project=project, role=Role.LEAD, user__username="lena").user


@pytest.fixture
def api(lead: Any, client_for: Callable[..., APIClient]) -> APIClient:
    return client_for(lead)


def _url(project: Any, suffix: str = "") -> str:
    return f"/api/v1/projects/{project.pk}/invites/{suffix}"


def test_a_lead_invites_one_person_by_address(project: Any, api: APIClient) -> None:
    response = api.post(
        _url(project),
        {"email": "Ann@Lab.Example", "role": "lead", "name": " Ann Lee ", "expires_in_days": 3},
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    invite = body["invite"]
    assert invite["email"] == "Ann@lab.example"  # the domain in lower case, as Django keeps it
    assert (invite["username"], invite["name"], invite["role"]) == (None, "Ann Lee", "lead")
    assert (invite["state"], invite["invited_by"]) == ("pending", "lena")
    assert body["link"].startswith("http://testserver/invite/#")
    assert (body["emailed"], body["email_error"]) == (True, "")
    assert mail.outbox[0].to == ["Ann@lab.example"] and body["link"] in mail.outbox[0].body
    # The link opens the invitation; the database never saw the token
    found = invite_find(token=body["link"].split("#")[1])
    assert found is not None and found.pk == invite["id"]
    assert body["link"].split("-")[-1] not in str(Invite.objects.values().get())
    expires = Invite.objects.get().expires_at
    assert expires - timezone.now() == pytest.approx(timedelta(days=3), abs=timedelta(minutes=1))


def test_links_start_with_the_site_url_when_it_is_set(
    project: Any, api: APIClient, settings: Any
) -> None:
    settings.STEPLAB_SITE_URL = "https://steplab.example.org"
    body = api.post(_url(project), {"email": "a@lab.example", "role": "annotator"}).json()
    assert body["link"].startswith("https://steplab.example.org/invite/#")


def test_a_lead_invites_an_existing_account_by_username(project: Any, api: APIClient) -> None:
    UserFactory(username="carol", email="")
    response = api.post(_url(project), {"username": "carol", "role": "ml"}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert (body["invite"]["username"], body["invite"]["email"]) == ("carol", "")
    assert (body["emailed"], body["email_error"]) == (False, "")  # no address to send to


@pytest.mark.parametrize(
    ("payload", "field", "message"),
    [
        ({"role": "annotator"}, "email", "Give an e-mail address or a username"),
        ({"email": "a@lab.example", "username": "x", "role": "lead"}, "email", "one of the two"),
        ({"email": "not-an-address", "role": "lead"}, "email", "Enter a valid email address."),
        ({"username": "ghost", "role": "lead"}, "username", "No active account is named 'ghost'"),
        ({"username": "lena", "role": "lead"}, "username", "lena is already a member"),
        ({"email": "a@lab.example", "role": "boss"}, "role", '"boss" is not a valid choice.'),
        ({"email": "a@lab.example", "role": "ml", "expires_in_days": 0}, "expires_in_days", ""),
        ({"email": "a@lab.example", "role": "ml", "expires_in_days": 31}, "expires_in_days", ""),
        ({"email": "a@lab.example", "role": "ml", "is_staff": True}, "is_staff", ""),
        ({"email": "a@lab.example", "role": "ml", "project": 1}, "project", ""),
    ],
)
def test_a_bad_invitation_is_a_400_naming_the_field(
    project: Any, api: APIClient, payload: dict[str, Any], field: str, message: str
) -> None:
    response = api.post(_url(project), payload, format="json")
    assert response.status_code == 400
    assert message in " ".join(response.json()[field])
    assert not Invite.objects.exists() and mail.outbox == []


def test_inviting_someone_with_a_pending_invitation_is_refused(
    project: Any, api: APIClient
) -> None:
    first = api.post(_url(project), {"email": "ann@lab.example", "role": "annotator"})
    again = api.post(_url(project), {"email": "ANN@lab.example", "role": "lead"})
    assert (first.status_code, again.status_code) == (201, 400)
    assert "revoke it to send a new link" in again.json()["email"][0]
    assert Invite.objects.count() == 1


def test_the_list_shows_open_invitations_newest_first(project: Any, api: APIClient) -> None:
    for address in ("a@lab.example", "b@lab.example", "c@lab.example", "d@lab.example"):
        api.post(_url(project), {"email": address, "role": "annotator"})
    a, b, c, d = Invite.objects.order_by("id")
    Invite.objects.filter(pk=b.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    api.post(_url(project, f"{c.pk}/revoke/"))
    invite_accept(invite_id=d.pk, token_hash=d.token_hash, user=UserFactory())
    response = api.get(_url(project))
    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 2
    assert [(i["email"], i["state"]) for i in body["results"]] == [
        ("b@lab.example", "expired"),
        ("a@lab.example", "pending"),
    ]
    assert set(body["results"][0]) == {
        "id",
        "email",
        "username",
        "name",
        "role",
        "state",
        "created_at",
        "expires_at",
        "invited_by",
    }


def test_a_list_invites_everyone_on_it(project: Any, api: APIClient) -> None:
    UserFactory(username="carol", email="carol@lab.example")
    text = "email,role,name\nann@lab.example,,Ann\nbob@lab.example,lead,Bob\n"
    response = api.post(_url(project, "bulk/"), {"text": text, "role": "ml"}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["count"] == 2
    assert [(i["invite"]["email"], i["invite"]["role"]) for i in body["invites"]] == [
        ("ann@lab.example", "ml"),
        ("bob@lab.example", "lead"),
    ]
    links = [i["link"] for i in body["invites"]]
    assert len(set(links)) == 2 and all(i["emailed"] for i in body["invites"])
    assert sorted(m.to[0] for m in mail.outbox) == ["ann@lab.example", "bob@lab.example"]
    # A spreadsheet's cells, pasted: tabs; a username among them
    pasted = "dan@lab.example\tannotator\ncarol\tml\n"
    assert api.post(_url(project, "bulk/"), {"text": pasted}).json()["count"] == 2
    assert Invite.objects.filter(project=project).count() == 4


def test_a_list_with_bad_lines_invites_nobody_and_names_each(project: Any, api: APIClient) -> None:
    api.post(_url(project), {"email": "pending@lab.example", "role": "annotator"})
    mail.outbox.clear()
    text = "ann@lab.example\nbob@lab.example,chief\n\npending@lab.example\nghost\n"
    response = api.post(_url(project, "bulk/"), {"text": text}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["detail"] == "Nobody was invited: 1 line of the list has problems."
    assert [(e["line"], e["who"]) for e in body["errors"]] == [(2, "bob@lab.example")]
    # Once the list reads, the checks against the project name every other bad line
    fixed = text.replace(",chief", "")
    body = api.post(_url(project, "bulk/"), {"text": fixed}, format="json").json()
    assert body["detail"] == "Nobody was invited: 2 people cannot be."
    assert [(e["line"], e["who"]) for e in body["errors"]] == [
        (4, "pending@lab.example"),
        (5, "ghost"),
    ]
    assert Invite.objects.count() == 1 and mail.outbox == []


def test_a_list_is_bounded_in_people_and_in_size(
    project: Any, api: APIClient, settings: Any
) -> None:
    settings.STEPLAB_INVITE_MAX_ROWS = 3
    four = "".join(f"p{i}@lab.example\n" for i in range(4))
    response = api.post(_url(project, "bulk/"), {"text": four}, format="json")
    assert response.status_code == 400
    assert response.json() == {"detail": "The list holds more than 3 people.", "errors": []}
    huge = "a@lab.example\n" + " " * MAX_LIST_CHARS
    response = api.post(_url(project, "bulk/"), {"text": huge}, format="json")
    assert response.status_code == 400
    assert "no more than 131072 characters" in response.json()["text"][0]
    assert not Invite.objects.exists()


def test_revoking_an_invitation(project: Any, api: APIClient) -> None:
    invite_id = api.post(_url(project), {"email": "a@lab.example", "role": "lead"}).json()[
        "invite"
    ]["id"]
    first = api.post(_url(project, f"{invite_id}/revoke/"))
    again = api.post(_url(project, f"{invite_id}/revoke/"))
    assert (first.status_code, again.status_code) == (200, 200)
    assert first.json()["state"] == again.json()["state"] == "revoked"
    invite = Invite.objects.get()
    assert invite_state(invite) == InviteState.REVOKED
    assert invite.revoked_by is not None and invite.revoked_by.username == "lena"
    assert api.get(_url(project)).json()["count"] == 0


def test_a_revoke_that_names_fields_is_refused(project: Any, api: APIClient) -> None:
    api.post(_url(project), {"email": "a@lab.example", "role": "lead"})
    invite = Invite.objects.get()
    response = api.post(_url(project, f"{invite.pk}/revoke/"), {"reason": "x"}, format="json")
    assert response.status_code == 400 and "reason" in response.json()
    assert invite_state(Invite.objects.get()) == InviteState.PENDING


def test_an_accepted_invitation_is_not_revoked(project: Any, api: APIClient) -> None:
    api.post(_url(project), {"email": "a@lab.example", "role": "lead"})
    invite = Invite.objects.get()
    invite_accept(invite_id=invite.pk, token_hash=invite.token_hash, user=UserFactory())
    response = api.post(_url(project, f"{invite.pk}/revoke/"))
    assert response.status_code == 400
    assert "remove the member instead" in response.json()["invite"][0]


def test_a_lead_of_two_projects_revokes_through_the_right_one_only(
    project: Any, lead: Any, api: APIClient
) -> None:
    other = ProjectFactory()
    MembershipFactory(project=other, user=lead, role=Role.LEAD)
    api.post(_url(other), {"email": "a@lab.example", "role": "lead"})
    invite = Invite.objects.get()
    assert api.post(_url(project, f"{invite.pk}/revoke/")).status_code == 404
    assert invite_state(Invite.objects.get()) == InviteState.PENDING


def test_a_superuser_invites_into_any_project(
    project: Any, client_for: Callable[..., APIClient]
) -> None:
    admin = UserFactory(is_staff=True, is_superuser=True)
    response = client_for(admin).post(_url(project), {"email": "a@lab.example", "role": "ml"})
    assert response.status_code == 201
    assert not Membership.objects.filter(user=admin).exists()


def test_the_list_s_queries_do_not_grow_with_invitations(project: Any, api: APIClient) -> None:
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert api.get(_url(project)).status_code == 200
        return len(captured.captured_queries)

    api.post(_url(project), {"email": "first@lab.example", "role": "annotator"})
    one = queries()
    text = "".join(f"p{i}@lab.example\n" for i in range(20))
    api.post(_url(project, "bulk/"), {"text": text}, format="json")
    UserFactory(username="carol")
    api.post(_url(project), {"username": "carol", "role": "ml"})
    assert queries() == one
