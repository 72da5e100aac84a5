"""Single sign-on through OpenID Connect (annotation/sso.py), against a real identity
provider on loopback (tests/oidc_provider.py): Steplab's server talks to it over HTTP
through django-allauth, unmodified; the test plays the browser with Django's test client
on Steplab's side and an HTTP client on the provider's side.

An account is made at the first sign-in and reused after; the group claim's mapped roles
are applied at every sign-in, and a person whose groups map to nothing gets no role; a
local account with the same username or e-mail is never taken over; with
STEPLAB_LOCAL_PASSWORDS off the form is gone and passwords are refused except for
superusers (break-glass); with no provider nothing of SSO shows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.test import Client

from annotation.models import Membership, Role
from tests.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.oidc_provider import OidcProvider
from tests.sso.invitations import invitation_opened

pytestmark = pytest.mark.django_db

ROLE_MAP = {
    "lab-leads": {"project": "Demo", "role": "lead"},
    "lab-annotators": [
        {"project": "Demo", "role": "annotator"},
        {"project": "Other", "role": "annotator"},
    ],
}


@pytest.fixture
def idp(settings: Any) -> Iterator[OidcProvider]:
    provider = OidcProvider().start()
    provider.configure(settings, role_map=ROLE_MAP)
    yield provider
    provider.stop()


def _sign_in(client: Client, idp: OidcProvider, person: dict[str, Any]) -> Any:
    """The browser's round trip through the provider (tests/oidc_provider.py)."""
    return idp.sign_in(client, person)


def _roles(user: User) -> dict[str, str]:
    return dict(Membership.objects.filter(user=user).values_list("project__name", "role"))


def test_first_sign_in_makes_the_account_with_the_mapped_role(idp: OidcProvider) -> None:
    # Given: project Demo with its lead
    demo = ProjectFactory(name="Demo")
    MembershipFactory(project=demo, role=Role.LEAD)
    client = Client()

    # When: a member of lab-leads signs in through the provider for the first time
    landed = _sign_in(
        client,
        idp,
        {
            "sub": "u-1",
            "preferred_username": "lena",
            "email": "lena@lab.org",
            "groups": ["lab-leads"],
        },
    )

    # Then: signed in, at home, as a new account named by preferred_username, lead of Demo
    assert landed.status_code == 302 and landed["Location"] == "/", idp.refused
    user = User.objects.get(username="lena")
    assert not user.has_usable_password()
    assert _roles(user) == {"Demo": "lead"}
    assert client.get("/").status_code == 200
    # ... and the provider saw the client's secret and a PKCE verifier (config/sso.py)
    assert idp.refused == [] and idp.token_requests[0].get("code_verifier")


def test_roles_follow_the_groups_at_every_sign_in(idp: OidcProvider) -> None:
    ProjectFactory(name="Demo")
    ProjectFactory(name="Other")
    person = {"sub": "u-2", "preferred_username": "ann", "groups": ["lab-annotators"]}
    _sign_in(Client(), idp, person)
    user = User.objects.get(username="ann")
    assert _roles(user) == {"Demo": "annotator", "Other": "annotator"}

    # When: she joins lab-leads at the provider and signs in again
    _sign_in(Client(), idp, {**person, "groups": ["lab-annotators", "lab-leads"]})

    # Then: the same account, lead of Demo (lead wins over annotator), still in Other
    assert User.objects.filter(username__startswith="ann").count() == 1
    assert _roles(user) == {"Demo": "lead", "Other": "annotator"}


def test_an_unmapped_person_signs_in_with_no_role(idp: OidcProvider) -> None:
    ProjectFactory(name="Demo")
    client = Client()
    landed = _sign_in(
        client, idp, {"sub": "u-3", "preferred_username": "guest", "groups": ["visitors"]}
    )
    assert landed.status_code == 302 and landed["Location"] == "/"
    user = User.objects.get(username="guest")
    assert _roles(user) == {}
    assert client.get("/api/v1/projects/").json()["results"] == []


def test_a_local_account_is_never_taken_over(idp: OidcProvider) -> None:
    # Given: a local account "mo" with an e-mail address
    local = UserFactory(username="mo", email="mo@lab.org")
    client = Client()

    # When: someone at the provider signs in as preferred_username "mo", same e-mail,
    # which the provider says it verified
    person = {"sub": "u-4", "preferred_username": "mo", "email": "mo@lab.org"}
    _sign_in(client, idp, {**person, "email_verified": True})

    # Then: a new account, not the local one
    signed_in = User.objects.get(pk=client.session["_auth_user_id"])
    assert signed_in.pk != local.pk and signed_in.username != "mo"


def test_a_sign_in_the_provider_refuses_signs_no_one_in(idp: OidcProvider) -> None:
    # Given: the client's secret was rotated at the provider, not in Steplab's settings
    idp.client_secret = "rotated-" + idp.client_secret
    client = Client()

    # When: someone goes through the provider
    landed = _sign_in(client, idp, {"sub": "u-6", "preferred_username": "mallory"})

    # Then: the provider refused the code's exchange; Steplab's failure page, no account
    assert idp.refused == ["token: wrong client credentials"]
    assert landed.status_code == 401
    assert "Sign-in failed" in landed.content.decode()
    assert not User.objects.filter(username="mallory").exists()
    assert "_auth_user_id" not in client.session


def test_a_sign_in_cancelled_at_the_provider_says_so(idp: OidcProvider) -> None:
    client = Client()
    start = client.post("/accounts/oidc/lab/login/")
    state = dict(httpx.URL(start["Location"]).params)["state"]
    back = client.get(
        "/accounts/oidc/lab/login/callback/", {"error": "access_denied", "state": state}
    )
    assert back.status_code == 302
    page = client.get(back["Location"])
    assert page.status_code == 200 and "Sign-in cancelled" in page.content.decode()


def test_the_login_page_shows_the_provider(idp: OidcProvider) -> None:
    page = Client().get("/login/").content.decode()
    assert "Sign in with Lab SSO" in page
    assert 'action="/accounts/oidc/lab/login/"' in page
    assert 'name="password"' in page  # local passwords are on by default


def test_local_passwords_off_hides_the_form_and_refuses_passwords(
    idp: OidcProvider, settings: Any
) -> None:
    settings.STEPLAB_LOCAL_PASSWORDS = False
    UserFactory(username="ann")
    UserFactory(username="root", is_staff=True, is_superuser=True)
    page = Client().get("/login/").content.decode()
    assert "Sign in with Lab SSO" in page and 'name="password"' not in page

    # A password posted to the login page is refused, even a superuser's
    assert Client().post("/login/", {"username": "ann", "password": "pass-1234"}).status_code == 403
    # ... and by the token endpoint and the admin's login, for everyone but superusers
    token = Client().post(
        "/api/v1/auth/token/",
        {"username": "ann", "password": "pass-1234"},
        content_type="application/json",
    )
    assert token.status_code == 400
    admin = Client().post(
        "/admin/login/?next=/admin/", {"username": "root", "password": "pass-1234"}
    )
    assert admin.status_code == 302 and admin["Location"] == "/admin/"
    # Single sign-on still works
    assert _sign_in(Client(), idp, {"sub": "u-5", "preferred_username": "sso"})["Location"] == "/"


def test_without_a_provider_nothing_of_sso_shows(settings: Any) -> None:
    assert settings.STEPLAB_OIDC_PROVIDERS == []
    page = Client().get("/login/").content.decode()
    assert "Sign in with" not in page and 'name="password"' in page
    assert Client().post("/accounts/oidc/lab/login/").status_code == 404
    assert Client().get("/accounts/oidc/lab/login/callback/?code=x&state=y").status_code == 404


def test_an_invitation_with_local_passwords_off_joins_through_the_provider(
    idp: OidcProvider, settings: Any
) -> None:
    # Given: password accounts are off and a lead invites someone to a project no group
    # maps to
    settings.STEPLAB_LOCAL_PASSWORDS = False
    client = invitation_opened(email="kim@lab.example")

    # When: the link's page is shown to someone not signed in
    page = client.get("/invite/").content.decode()

    # Then: no password form, the provider's button coming back to the invitation
    assert 'name="password1"' not in page and "Sign in with Lab SSO" in page
    assert 'name="next" value="/invite/"' in page
    # And a password account posted anyway is refused, no account made
    refused = client.post(
        "/invite/",
        {"action": "accept", "username": "kim", "password1": "a-Long-1", "password2": "a-Long-1"},
    )
    assert refused.status_code == 400 and "single sign-on" in refused.content.decode()
    assert not User.objects.filter(username="kim").exists()
    # When: they sign in through the provider and come back, they join with that account
    _sign_in(client, idp, {"sub": "u-9", "preferred_username": "kim"})
    joined = client.post("/invite/", {"action": "accept"})
    assert joined.status_code == 302
    assert _roles(User.objects.get(username="kim")) == {"Unmapped": Role.ANNOTATOR}
