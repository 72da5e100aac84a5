"""Token login, use and revocation; session auth with CSRF. (The sign-in lockout:
tests/test_sign_in_lockout.py.)"""

from __future__ import annotations

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from annotation.models import Role
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db

TOKEN_URL = "/api/v1/auth/token/"


def test_token_end_to_end(api_client: APIClient) -> None:
    # Given a member of a project
    member = MembershipFactory(role=Role.ANNOTATOR, user=UserFactory(username="ada"))
    # When she exchanges her password for a token
    response = api_client.post(TOKEN_URL, {"username": "ada", "password": "pass-1234"})
    assert response.status_code == 200
    token = response.json()["token"]
    assert Token.objects.get(user=member.user).key == token

    # Then the token authenticates API calls
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    listed = client.get("/api/v1/projects/")
    assert listed.status_code == 200
    assert [p["id"] for p in listed.json()["results"]] == [member.project_id]

    # and asking again returns the same token
    again = api_client.post(TOKEN_URL, {"username": "ada", "password": "pass-1234"}, format="json")
    assert again.json()["token"] == token

    # When she revokes it, it is refused afterwards
    assert client.delete(TOKEN_URL).status_code == 204
    assert not Token.objects.filter(user=member.user).exists()
    assert client.get("/api/v1/projects/").status_code == 401


@pytest.mark.parametrize(
    ("username", "password", "active"),
    [("ada", "wrong", True), ("nobody", "pass-1234", True), ("ada", "pass-1234", False)],
)
def test_bad_credentials_get_one_answer(
    api_client: APIClient, username: str, password: str, active: bool
) -> None:
    UserFactory(username="ada", is_active=active)
    response = api_client.post(TOKEN_URL, {"username": username, "password": password})
    assert response.status_code == 400
    # The same message whether or not the user exists.
    assert response.json() == {"non_field_errors": ["Unable to log in with these credentials."]}
    assert Token.objects.count() == 0


def test_missing_fields_are_400(api_client: APIClient) -> None:
    response = api_client.post(TOKEN_URL, {"username": "ada"})
    assert response.status_code == 400
    assert "password" in response.json()


def test_revoke_needs_authentication(api_client: APIClient) -> None:
    assert api_client.delete(TOKEN_URL).status_code == 401


def test_revoking_one_users_token_keeps_anothers(api_client: APIClient) -> None:
    first, second = (
        Token.objects.create(user=UserFactory()),
        Token.objects.create(user=UserFactory()),
    )
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {first.key}")
    assert api_client.delete(TOKEN_URL).status_code == 204
    assert list(Token.objects.values_list("key", flat=True)) == [second.key]


def test_revoke_is_not_throttled(api_client: APIClient) -> None:
    user = UserFactory()
    api_client.force_authenticate(user=user)
    codes = {api_client.delete(TOKEN_URL).status_code for _ in range(15)}
    assert codes == {204}


def test_session_api_calls_need_the_csrf_token() -> None:
    # Given a staff user logged in through the login page (a session, as the pages use)
    UserFactory(username="boss", is_staff=True)
    client = APIClient(enforce_csrf_checks=True)
    login_page = client.get("/login/")
    csrf = login_page.cookies["csrftoken"].value
    logged_in = client.post(
        "/login/",
        {"username": "boss", "password": "pass-1234", "csrfmiddlewaretoken": csrf},
        format="multipart",  # the page's form
    )
    assert logged_in.status_code == 302
    payload = {"name": "via session", "overlap": 1, "labeling_mode": "all_steps"}

    # When an unsafe API call comes without the CSRF header, it is refused
    refused = client.post("/api/v1/projects/", payload, format="json")
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]

    # and with the header, it goes through
    csrf = client.cookies["csrftoken"].value
    accepted = client.post("/api/v1/projects/", payload, format="json", HTTP_X_CSRFTOKEN=csrf)
    assert accepted.status_code == 201
    # A session GET needs no token.
    assert client.get("/api/v1/projects/").status_code == 200
