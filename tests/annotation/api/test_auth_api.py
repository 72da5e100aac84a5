"""Token login, use and revocation; a user's own tokens listed, made and revoked; session
auth with CSRF. (The sign-in lockout: tests/test_sign_in_lockout.py; what a token may do
on each door: tests/annotation/labeling/test_queue_token_auth.py.)"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.api_tokens import key_hash
from annotation.models import ApiToken, Role
from tests.factories import MembershipFactory, UserFactory, api_token_key

pytestmark = pytest.mark.django_db

TOKEN_URL = "/api/v1/auth/token/"


def test_token_end_to_end(api_client: APIClient) -> None:
    # Given a member of a project
    member = MembershipFactory(role=Role.ANNOTATOR, user=UserFactory(username="ada"))
    # When she exchanges her password for a token
    response = api_client.post(TOKEN_URL, {"username": "ada", "password": "pass-1234"})
    assert response.status_code == 200
    token = response.json()["token"]
    stored = ApiToken.objects.get(user=member.user)
    # Only the key's hash is stored; the token expires in STEPLAB_API_TOKEN_DAYS
    assert stored.key_hash == key_hash(token) and token not in stored.key_hash
    assert (stored.name, stored.scope) == ("Token sign-in", "full")
    assert stored.expires_at - stored.created_at == timedelta(days=30)

    # Then the token authenticates API calls
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    listed = client.get("/api/v1/projects/")
    assert listed.status_code == 200
    assert [p["id"] for p in listed.json()["results"]] == [member.project_id]

    # and asking again makes another token (a script's own), the first one still works
    again = api_client.post(TOKEN_URL, {"username": "ada", "password": "pass-1234"}, format="json")
    assert again.json()["token"] != token
    assert ApiToken.objects.filter(user=member.user).count() == 2

    # When she revokes the first, it is refused afterwards and the second is not
    assert client.delete(TOKEN_URL).status_code == 204
    assert client.get("/api/v1/projects/").status_code == 401
    second = APIClient()
    second.credentials(HTTP_AUTHORIZATION=f"Token {again.json()['token']}")
    assert second.get("/api/v1/projects/").status_code == 200


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
    assert ApiToken.objects.count() == 0


def test_missing_fields_are_400(api_client: APIClient) -> None:
    response = api_client.post(TOKEN_URL, {"username": "ada"})
    assert response.status_code == 400
    assert "password" in response.json()


def test_revoke_needs_authentication(api_client: APIClient) -> None:
    assert api_client.delete(TOKEN_URL).status_code == 401


def test_revoking_one_users_token_keeps_anothers(api_client: APIClient) -> None:
    first, second = UserFactory(), UserFactory()
    first_key = api_token_key(first)
    api_token_key(second)
    api_client.credentials(HTTP_AUTHORIZATION=f"Token {first_key}")
    assert api_client.delete(TOKEN_URL).status_code == 204
    assert list(ApiToken.objects.values_list("user", flat=True)) == [second.pk]


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


# --- a user's own tokens (what the /tokens/ page calls) --------------------------------

TOKENS_URL = "/api/v1/auth/tokens/"


def test_a_user_makes_lists_and_revokes_named_tokens(api_client: APIClient) -> None:
    # Given a signed-in user
    user = UserFactory()
    api_client.force_login(user)

    # When she makes a read-only token, the key is in that answer only
    made = api_client.post(TOKENS_URL, {"name": "dashboard", "scope": "read"}, format="json")
    assert made.status_code == 201
    key = made.json()["key"]
    assert made.json()["prefix"] == key[:8] and made.json()["state"] == "active"
    listed = api_client.get(TOKENS_URL).json()
    assert [(t["name"], t["scope"], t["state"]) for t in listed] == [
        ("dashboard", "read", "active")
    ]
    assert "key" not in listed[0] and listed[0]["last_used_at"] is None

    # Then it reads; its use shows on the list
    reader = APIClient()
    reader.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert reader.get("/api/v1/projects/").status_code == 200
    assert api_client.get(TOKENS_URL).json()[0]["last_used_at"] is not None

    # When she revokes it, it stops working and leaves the list
    token_id = listed[0]["id"]
    assert api_client.delete(f"{TOKENS_URL}{token_id}/").status_code == 204
    assert reader.get("/api/v1/projects/").status_code == 401
    assert api_client.get(TOKENS_URL).json() == []
    assert api_client.delete(f"{TOKENS_URL}{token_id}/").status_code == 404


def test_nobody_sees_or_revokes_another_users_tokens(api_client: APIClient) -> None:
    owner = UserFactory()
    api_token_key(owner, name="owner's")
    token = ApiToken.objects.get()
    api_client.force_login(UserFactory())

    assert api_client.get(TOKENS_URL).json() == []
    assert api_client.delete(f"{TOKENS_URL}{token.pk}/").status_code == 404
    assert ApiToken.objects.filter(pk=token.pk).exists()


def test_the_list_says_which_tokens_ended(api_client: APIClient) -> None:
    user = UserFactory()
    api_token_key(user, name="old")
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    api_token_key(user, name="before the change")  # (making one clears the expired)
    api_token_key(user, name="expired")
    ApiToken.objects.filter(name="expired").update(expires_at=timezone.now())
    user.set_password("a-new-password-5678")
    user.save()
    api_client.force_login(user)

    states = {t["name"]: t["state"] for t in api_client.get(TOKENS_URL).json()}

    assert states == {"expired": "expired", "before the change": "password_changed"}


@pytest.mark.parametrize(
    ("body", "field"),
    [({}, "name"), ({"name": "   "}, "name"), ({"name": "x", "scope": "admin"}, "scope")],
)
def test_a_token_needs_a_name_and_a_known_scope(
    api_client: APIClient, body: dict, field: str
) -> None:
    api_client.force_login(UserFactory())
    response = api_client.post(TOKENS_URL, body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert not ApiToken.objects.exists()


@override_settings(STEPLAB_API_TOKENS_PER_USER=3, STEPLAB_API_TOKEN_DAYS=7)
def test_tokens_per_user_are_bounded(api_client: APIClient) -> None:
    # Given a user holding the most tokens one may: two of the page's, one sign-in token
    user = UserFactory(username="ada")
    api_client.force_login(user)
    for name in ("one", "two"):
        assert api_client.post(TOKENS_URL, {"name": name}, format="json").status_code == 201
    sign_in = {"username": "ada", "password": "pass-1234"}
    first = APIClient().post(TOKEN_URL, sign_in, format="json").json()["token"]

    # When the page asks for one more, it is refused, naming the bound
    refused = api_client.post(TOKENS_URL, {"name": "three"}, format="json")
    assert refused.status_code == 400
    assert "3 tokens" in str(refused.json())

    # And a sign-in replaces the oldest sign-in token instead of failing
    second = APIClient().post(TOKEN_URL, sign_in, format="json").json()["token"]
    assert ApiToken.objects.filter(user=user).count() == 3
    assert not ApiToken.objects.filter(key_hash=key_hash(first)).exists()
    assert ApiToken.objects.filter(key_hash=key_hash(second)).exists()
    # (the lifetime is the setting's)
    token = ApiToken.objects.get(key_hash=key_hash(second))
    assert token.expires_at - token.created_at == timedelta(days=7)
