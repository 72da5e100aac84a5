"""``steplab`` against a live server: projects, members and invitations, and how errors
read (the server's status and message, never a traceback)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from annotation.models import ApiToken, Invite, Membership, Project, Role
from tests.client.conftest import Steplab
from tests.factories import UserFactory, api_token_key

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_lead_runs_projects_members_and_invites_from_the_command_line(
    steplab: Steplab, tmp_path: Path
) -> None:
    # Given: a staff user with a token, and an account to add
    lead = UserFactory(username="lena", is_staff=True)
    token = api_token_key(lead)
    UserFactory(username="mo")

    # When: the lead creates a project
    created = steplab(
        token, "projects", "create", "Round 1", "--overlap", "2", "--set", "gold_rate=0.1", "--json"
    )
    assert created.code == 0, created.err
    project = Project.objects.get(name="Round 1")
    assert created.json()["id"] == project.pk
    assert (project.overlap, project.gold_rate, created.json()["role"]) == (2, 0.1, "lead")

    # Then: it lists, shows (by id or by name) and changes its settings
    listed = steplab(token, "projects", "list")
    assert listed.code == 0 and "Round 1" in listed.out and "lead" in listed.out
    assert steplab(token, "projects", "show", "Round 1", "--json").json()["id"] == project.pk
    changed = steplab(
        token, "projects", "settings", str(project.pk), "--set", "overlap=3", "--json"
    )
    assert changed.code == 0, changed.err
    assert changed.json()["overlap"] == 3
    project.refresh_from_db()
    assert project.overlap == 3

    # ...adds a member, changes the role, lists and removes
    added = steplab(token, "members", "add", str(project.pk), "mo", "--role", "annotator")
    assert added.code == 0, added.err
    mo = Membership.objects.get(project=project, user__username="mo")
    role = steplab(token, "members", "role", str(project.pk), str(mo.user_id), "ml", "--json")
    assert role.json()["role"] == "ml"
    members = steplab(token, "members", "list", str(project.pk), "--json").json()
    assert {(row["username"], row["role"]) for row in members} == {("lena", "lead"), ("mo", "ml")}
    assert steplab(token, "members", "remove", str(project.pk), str(mo.user_id)).code == 0
    assert not Membership.objects.filter(project=project, user=mo.user).exists()

    # ...invites one person, then a CSV list, lists and revokes
    one = steplab(
        token, "invites", "create", str(project.pk), "--email", "ann@lab.example", "--role",
        "annotator", "--json",
    )  # fmt: skip
    assert one.code == 0, one.err
    assert "/invite/" in one.json()["link"]
    csv_file = tmp_path / "people.csv"
    csv_file.write_text("email,role,name\nbob@lab.example,annotator,Bob\ncy@lab.example,lead,Cy\n")
    bulk = steplab(token, "invites", "bulk", str(project.pk), str(csv_file))
    assert bulk.code == 0, bulk.err
    assert "bob@lab.example" in bulk.out and "cy@lab.example" in bulk.out
    open_invites = steplab(token, "invites", "list", str(project.pk), "--json").json()
    assert {row["email"] for row in open_invites} == {
        "ann@lab.example",
        "bob@lab.example",
        "cy@lab.example",
    }
    cy = Invite.objects.get(project=project, email="cy@lab.example")
    assert cy.role == Role.LEAD
    revoked = steplab(token, "invites", "revoke", str(project.pk), str(cy.pk), "--json")
    assert revoked.code == 0, revoked.err
    assert revoked.json()["state"] == "revoked"


def test_errors_show_the_servers_status_and_message_not_a_traceback(
    steplab: Steplab, tmp_path: Path
) -> None:
    # Given: a project, its lead, an annotator of it, and a list with one bad line
    lead = UserFactory(username="lena", is_staff=True)
    project = Project.objects.create(name="P", overlap=1)
    Membership.objects.create(project=project, user=lead, role=Role.LEAD)
    annotator = UserFactory(username="ann")
    Membership.objects.create(project=project, user=annotator, role=Role.ANNOTATOR)
    people = tmp_path / "people.txt"
    people.write_text("bob@lab.example\nnot-an-address@\n")

    # When / then: no token at all: a usage error naming where a token may come from
    missing = steplab(None, "projects", "list")
    assert missing.code == 2
    assert "STEPLAB_TOKEN" in missing.err and "Traceback" not in missing.err

    # ...a server that is not there: said at once (a read is retried only once reached)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        nowhere = f"http://127.0.0.1:{probe.getsockname()[1]}"
    unreachable = steplab("0" * 40, "--url", nowhere, "projects", "list")
    assert unreachable.code == 1 and f"Cannot reach {nowhere}" in unreachable.err

    # ...a wrong token: the server's 401 and its message
    wrong = steplab("0" * 40, "projects", "list")
    assert wrong.code == 1
    assert "HTTP 401" in wrong.err and "Invalid token." in wrong.err

    # ...an annotator asking for a lead's page: the 403 with the server's reason
    refused = steplab(api_token_key(annotator), "invites", "list", str(project.pk))
    assert refused.code == 1 and "HTTP 403" in refused.err

    # ...a list with a bad line: the 400 names the line, and nobody is invited
    bad = steplab(api_token_key(lead), "invites", "bulk", str(project.pk), str(people))
    assert bad.code == 1
    assert "HTTP 400" in bad.err and "line 2" in bad.err
    assert not Invite.objects.filter(project=project).exists()

    # ...a read-only token asked to write
    read_only = api_token_key(lead, scope="read", name="ro")
    written = steplab(read_only, "projects", "settings", str(project.pk), "--set", "overlap=2")
    assert written.code == 1 and "HTTP 403" in written.err and "read-only" in written.err


def test_a_person_makes_lists_and_revokes_their_tokens(steplab: Steplab) -> None:
    # Given: a user with a token
    user = UserFactory(username="lena")
    token = api_token_key(user, name="laptop")

    # When: they make a read-only token for a script
    made = steplab(token, "tokens", "create", "nightly export", "--scope", "read", "--json")

    # Then: its key is shown once, and it reads but may not write
    assert made.code == 0, made.err
    key = made.json()["key"]
    assert made.json()["scope"] == "read"
    assert steplab(key, "projects", "list").code == 0
    written = steplab(key, "tokens", "create", "another")
    assert written.code == 1 and "HTTP 403" in written.err

    # ...both are listed, without their keys
    listed = steplab(token, "tokens", "list")
    assert "nightly export" in listed.out and "laptop" in listed.out and key not in listed.out

    # ...and once revoked, the key is refused
    assert steplab(token, "tokens", "revoke", str(made.json()["id"])).code == 0
    refused = steplab(key, "projects", "list")
    assert refused.code == 1 and "HTTP 401" in refused.err
    assert ApiToken.objects.filter(user=user).count() == 1
