"""LDAP sign-in (annotation/sso_ldap.py) against a real directory: Debian's slapd started
by the tests (tests/ldap_server.py), reached by django-auth-ldap and python-ldap,
unmodified. The login form is posted with Django's test client.

A directory account signs in through the login form and gets an account with its names
and the mapped role at every sign-in; a wrong password is refused and counted by
django-axes up to the lockout; someone in no mapped group gets no project; a local
account is never taken over by a directory entry of the same name; with local passwords
off the form takes directory accounts only (superusers excepted); STARTTLS checks the
directory's certificate; with LDAP off nothing changes."""

from __future__ import annotations

from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib.auth.models import User
from django.test import Client

from annotation.models import Membership, Role
from tests.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.ldap_server import LdapServer, password_of
from tests.sso.invitations import invitation_opened

pytestmark = pytest.mark.django_db


@pytest.fixture
def ldap_on(ldap_server: LdapServer, settings: Any) -> LdapServer:
    ldap_server.configure(settings)
    return ldap_server


def _log_in(client: Client, username: str, password: str) -> Any:
    return client.post("/login/", {"username": username, "password": password, "next": "/"})


def _roles(user: User) -> dict[str, str]:
    return dict(Membership.objects.filter(user=user).values_list("project__name", "role"))


def test_a_directory_account_signs_in_with_the_mapped_role(ldap_on: LdapServer) -> None:
    # Given: project Demo with its lead, and Lena in the directory's group lab-leads
    demo = ProjectFactory(name="Demo")
    MembershipFactory(project=demo, role=Role.LEAD)
    client = Client()

    # When: she logs in with her directory username and password
    landed = _log_in(client, "lena", password_of("lena"))

    # Then: signed in at home, as a new account with the directory's names, lead of Demo
    assert landed.status_code == 302 and landed["Location"] == "/"
    user = User.objects.get(username="lena")
    assert (user.first_name, user.last_name, user.email) == ("Lena", "Lead", "lena@lab.example")
    assert not user.has_usable_password()
    assert _roles(user) == {"Demo": "lead"}
    assert client.get("/").status_code == 200
    # ... and her second sign-in reuses the account
    assert _log_in(Client(), "Lena", password_of("lena")).status_code == 302
    assert User.objects.filter(username__iexact="lena").count() == 1


def test_a_search_by_template_signs_in_too(ldap_server: LdapServer, settings: Any) -> None:
    # Bound directly as uid=<username>,ou=people,...: no bind account, no search.
    ldap_server.configure(
        settings,
        STEPLAB_LDAP_USER_SEARCH="",
        STEPLAB_LDAP_BIND_DN="",
        STEPLAB_LDAP_BIND_PASSWORD="",
        STEPLAB_LDAP_USER_DN_TEMPLATE="uid=%(user)s,ou=people,dc=lab,dc=example",
        STEPLAB_LDAP_ROLE_MAP="",
        STEPLAB_LDAP_GROUP_SEARCH="",
    )
    assert _log_in(Client(), "ann", password_of("ann")).status_code == 302
    assert User.objects.get(username="ann").email == "ann@lab.example"


def test_a_wrong_password_is_refused_and_counted(ldap_on: LdapServer, settings: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    client = Client()

    # When: someone tries Lena's name with wrong passwords
    for _ in range(2):
        refused = _log_in(client, "lena", "not-her-password")
        assert refused.status_code == 200 and "_auth_user_id" not in client.session

    # Then: each is a failure for django-axes; the limit locks the name out, and then
    # even the right password is refused
    assert AccessAttempt.objects.get(username="lena").failures_since_start == 2
    assert _log_in(client, "lena", "still-wrong").status_code == 429
    assert _log_in(Client(), "lena", password_of("lena")).status_code == 429
    assert not User.objects.filter(username="lena").exists()


def test_another_letter_case_of_a_locked_directory_name_is_locked_too(
    ldap_on: LdapServer, settings: Any
) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    # Given: the limit of wrong passwords reached for "lena"
    for _ in range(3):
        _log_in(Client(), "lena", "not-her-password")
    # When: her name is written in other letter cases, which the directory matches as hers
    # Then: each is held by the same lock, the right password included
    for variant in ("Lena", "LENA", "lEna"):
        assert _log_in(Client(), variant, password_of("lena")).status_code == 429, variant
    assert not User.objects.filter(username__iexact="lena").exists()


def test_a_person_in_no_mapped_group_gets_no_project(ldap_on: LdapServer) -> None:
    ProjectFactory(name="Demo")
    client = Client()
    assert _log_in(client, "guest", password_of("guest")).status_code == 302
    assert _roles(User.objects.get(username="guest")) == {}
    assert client.get("/api/v1/projects/").json()["results"] == []


def test_roles_follow_the_groups_at_every_sign_in(ldap_on: LdapServer, settings: Any) -> None:
    demo = ProjectFactory(name="Demo")
    MembershipFactory(project=demo, role=Role.LEAD)
    ProjectFactory(name="Other")
    _log_in(Client(), "ann", password_of("ann"))
    ann = User.objects.get(username="ann")
    assert _roles(ann) == {"Demo": "annotator"}

    # When: the map gives lab-annotators (by its DN, in other case) Other as well
    ldap_on.configure(
        settings,
        STEPLAB_LDAP_ROLE_MAP=(
            '{"CN=lab-annotators,ou=groups,dc=lab,dc=example":'
            ' [{"project": "Demo"}, {"project": "Other", "role": "ml"}]}'
        ),
    )
    _log_in(Client(), "ann", password_of("ann"))

    # Then: her next sign-in applies it
    assert _roles(ann) == {"Demo": "annotator", "Other": "ml"}


def test_a_local_account_is_never_taken_over(ldap_on: LdapServer) -> None:
    # Given: a local superuser who happens to be named like a directory entry
    local = UserFactory(username="lena", is_staff=True, is_superuser=True)

    # When: the directory's Lena logs in with her directory password
    client = Client()
    refused = _log_in(client, "lena", password_of("lena"))

    # Then: refused, the local account untouched; its own password still works
    assert refused.status_code == 200 and "_auth_user_id" not in client.session
    local.refresh_from_db()
    assert local.first_name != "Lena" and local.has_usable_password()
    assert _log_in(Client(), "lena", "pass-1234").status_code == 302


def test_local_passwords_off_keeps_directory_accounts_only(
    ldap_on: LdapServer, settings: Any
) -> None:
    settings.STEPLAB_LOCAL_PASSWORDS = False
    UserFactory(username="mo")
    UserFactory(username="root", is_staff=True, is_superuser=True)

    # The form is still there, for the directory
    page = Client().get("/login/").content.decode()
    assert 'name="password"' in page and "Log in with your directory username" in page

    # A directory account signs in; a local one is refused and counted; a superuser's
    # break-glass password still works
    assert _log_in(Client(), "lena", password_of("lena")).status_code == 302
    refused = _log_in(Client(), "mo", "pass-1234")
    assert refused.status_code == 200 and "correct username and password" in refused.text
    assert AccessAttempt.objects.get(username="mo").failures_since_start == 1
    assert _log_in(Client(), "root", "pass-1234").status_code == 302


def test_starttls_checks_the_directorys_certificate(ldap_server: LdapServer, settings: Any) -> None:
    # With the CA that signed the directory's certificate: signed in over TLS
    ldap_server.configure(
        settings, STEPLAB_LDAP_START_TLS="1", STEPLAB_LDAP_CA_FILE=ldap_server.ca_file
    )
    assert _log_in(Client(), "ann", password_of("ann")).status_code == 302

    # With another CA the handshake fails: nobody signs in, not even with the right password
    ldap_server.configure(
        settings, STEPLAB_LDAP_START_TLS="1", STEPLAB_LDAP_CA_FILE=ldap_server.other_ca_file
    )
    client = Client()
    assert _log_in(client, "lena", password_of("lena")).status_code == 200
    assert "_auth_user_id" not in client.session
    assert not User.objects.filter(username="lena").exists()


def test_with_ldap_off_nothing_changes(ldap_server: LdapServer, settings: Any) -> None:
    assert settings.STEPLAB_LDAP_URI == "" and settings.AUTH_LDAP_SERVER_URI == ""
    UserFactory(username="mo")
    page = Client().get("/login/").content.decode()
    assert 'name="password"' in page and "directory" not in page
    # A directory account does not sign in; a local one does
    assert _log_in(Client(), "lena", password_of("lena")).status_code == 200
    assert not User.objects.filter(username="lena").exists()
    assert _log_in(Client(), "mo", "pass-1234").status_code == 302


def test_an_invitation_with_local_passwords_off_joins_through_the_directory(
    ldap_on: LdapServer, settings: Any
) -> None:
    # Given: local passwords off, a lead invites someone to a project no group maps to
    settings.STEPLAB_LOCAL_PASSWORDS = False
    client = invitation_opened(email="guest@lab.example")

    # When: the link's page is shown to someone not signed in
    page = client.get("/invite/").content.decode()

    # Then: no password account to make; a way to log in with the directory and come back
    assert 'name="password1"' not in page
    assert 'href="/login/?next=/invite/">Log in with your directory account' in page
    client.post("/login/", {"username": "guest", "password": password_of("guest")})
    assert client.post("/invite/", {"action": "accept"}).status_code == 302
    assert _roles(User.objects.get(username="guest")) == {"Unmapped": Role.ANNOTATOR}
