"""Sign-in lockout (django-axes): failed attempts lock a username at the guesser's address
on every entry point (the login page, the token endpoint, the admin login), in any letter
case; successful sign-ins are never counted, so a lab behind one office address signs in
at once; a username across addresses, and an address across usernames, are locked only
after many more failures, by the trusted proxies' rule for X-Forwarded-For, and then only
where the username has not signed in lately.
(Across two gunicorn workers: tests/test_deploy_processes.py.)"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client
from django.utils import timezone

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

PASSWORD = "pass-1234"  # tests.factories.UserFactory's
OFFICE = "203.0.113.7"
TOKEN_URL = "/api/v1/auth/token/"


def _login_page(client: Client, username: str, password: str, address: str = OFFICE) -> Any:
    return client.post("/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


def _token(client: Client, username: str, password: str, address: str = OFFICE) -> Any:
    return client.post(
        TOKEN_URL,
        {"username": username, "password": password},
        content_type="application/json",
        REMOTE_ADDR=address,
    )


def _admin(client: Client, username: str, password: str, address: str = OFFICE) -> Any:
    return client.post(
        "/admin/login/?next=/admin/",
        {"username": username, "password": password},
        REMOTE_ADDR=address,
    )


ENTRY_POINTS: dict[str, tuple[Callable[..., Any], int, int]] = {
    # entry point: (post, status of a wrong password, status of a right one)
    "login page": (_login_page, 200, 302),
    "token endpoint": (_token, 400, 200),
    "admin login": (_admin, 200, 302),
}


def test_a_lab_of_thirty_behind_one_address_all_sign_in() -> None:
    # Given: 30 annotators behind one office address
    users = [UserFactory(username=f"annotator-{i}") for i in range(30)]
    # When: each signs in through the page and asks for a token within the same minute
    page = [_login_page(Client(), u.username, PASSWORD).status_code for u in users]
    token = [_token(Client(), u.username, PASSWORD).status_code for u in users]
    # Then: every one succeeds, and nothing was counted against the address
    assert page == [302] * 30
    assert token == [200] * 30
    assert not AccessAttempt.objects.exists()


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_wrong_passwords_lock_the_account_on_every_entry_point(entry: str) -> None:
    post, wrong_status, right_status = ENTRY_POINTS[entry]
    limit = settings.AXES_FAILURE_LIMIT
    # Given: a staff account (so the admin login would let it in) and a guesser
    user = UserFactory(is_staff=True)
    guesser = Client()
    # When: 20 wrong passwords come for it
    codes = [post(guesser, user.username, f"guess-{i}").status_code for i in range(20)]
    # Then: the attempts up to the limit are answered as usual, the rest refused with 429
    assert codes == [wrong_status] * (limit - 1) + [429] * (21 - limit)
    # And: even the right password is refused, on this and on every other entry point
    for other, _, _ in ENTRY_POINTS.values():
        refused = other(Client(), user.username, PASSWORD)
        assert refused.status_code == 429
        assert int(refused["Retry-After"]) > 0
    # And: another account at the same address signs in as usual
    colleague = UserFactory(is_staff=True)
    assert post(Client(), colleague.username, PASSWORD).status_code == right_status


def test_the_lockout_says_why_as_json_in_the_api_and_as_a_page_on_the_form() -> None:
    user = UserFactory()
    for i in range(settings.AXES_FAILURE_LIMIT):
        _token(Client(), user.username, f"guess-{i}")
    api = _token(Client(), user.username, PASSWORD)
    assert api.status_code == 429
    assert api["Content-Type"] == "application/json"
    assert "Too many failed sign-ins" in api.json()["detail"]
    client = Client()
    page = _login_page(client, user.username, PASSWORD)
    assert page.status_code == 429
    assert page["Content-Type"].startswith("text/html")
    assert b"Sign-in locked" in page.content and b"Too many failed sign-ins" in page.content
    assert "_auth_user_id" not in client.session


def test_the_lock_lifts_after_the_cool_off() -> None:
    # Given: a locked account
    user = UserFactory()
    for i in range(settings.AXES_FAILURE_LIMIT):
        _token(Client(), user.username, f"guess-{i}")
    assert _token(Client(), user.username, PASSWORD).status_code == 429
    # When: its last failure is older than the cool-off
    AccessAttempt.objects.update(
        attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME - timedelta(seconds=1)
    )
    # Then: the right password works again
    assert _token(Client(), user.username, PASSWORD).status_code == 200


def test_an_address_is_locked_only_after_many_more_failures(settings: Any) -> None:
    settings.STEPLAB_LOGIN_ADDRESS_FAILURE_LIMIT = 13
    users = [UserFactory() for _ in range(7)]
    # Given: typos spread over many accounts from one address, below the address limit
    for user in users[:6]:
        for i in range(2):
            assert _token(Client(), user.username, f"typo-{i}").status_code == 400
    # Then: every account still signs in (12 failures, none locked)
    assert _token(Client(), users[0].username, PASSWORD).status_code == 200
    # When: one more failure reaches the address limit
    _token(Client(), users[6].username, "typo")
    # Then: the address is locked for the accounts that have not signed in from it, and
    # only there; the one that signed in from it before still does
    assert _token(Client(), users[1].username, PASSWORD).status_code == 429
    assert _token(Client(), users[1].username, PASSWORD, "198.51.100.2").status_code == 200
    assert _token(Client(), users[0].username, PASSWORD).status_code == 200


def test_a_guesser_spraying_usernames_from_a_lab_s_address_locks_out_no_one_who_works_there(
    settings: Any,
) -> None:
    settings.STEPLAB_LOGIN_ADDRESS_FAILURE_LIMIT = 40
    # Given: 17 people who sign in from the lab's one address, through the page or the API
    lab = [UserFactory(username=f"lab-{i}") for i in range(17)]
    for i, user in enumerate(lab):
        post = _login_page if i % 2 else _token
        assert post(Client(), user.username, PASSWORD).status_code in (200, 302)
    newcomer = UserFactory(username="newcomer")
    # When: a guesser at the same address sprays random usernames past the address's bound
    codes = [_token(Client(), f"guess-{i:03d}", "hunter2").status_code for i in range(41)]
    # Then: the guesser is refused once the bound is reached
    assert codes == [400] * 39 + [429] * 2
    # And: all 17 still sign in from there, through the page and the API
    for user in lab:
        assert _login_page(Client(), user.username, PASSWORD).status_code == 302
        assert _token(Client(), user.username, PASSWORD).status_code == 200
    # And: a username never seen at this address waits out the cool-off there, not elsewhere
    assert _token(Client(), newcomer.username, PASSWORD).status_code == 429
    assert _token(Client(), newcomer.username, PASSWORD, "198.51.100.2").status_code == 200
    # And: a known account is still held by its own limit against the guesser
    for i in range(settings.AXES_FAILURE_LIMIT):
        _token(Client(), lab[0].username, f"guess-{i}")
    assert _token(Client(), lab[0].username, PASSWORD).status_code == 429
    assert _token(Client(), lab[1].username, PASSWORD).status_code == 200


def test_a_sign_in_counts_as_known_at_an_address_only_for_a_while(settings: Any) -> None:
    from annotation.models import KnownSignIn

    settings.STEPLAB_LOGIN_ADDRESS_FAILURE_LIMIT = 3
    user = UserFactory()
    assert _token(Client(), user.username, PASSWORD).status_code == 200
    for i in range(3):
        _token(Client(), f"guess-{i}", "wrong")
    assert _token(Client(), user.username, PASSWORD).status_code == 200
    # When: the last sign-in from here is older than the window
    KnownSignIn.objects.update(
        last_at=timezone.now() - timedelta(days=settings.STEPLAB_LOGIN_KNOWN_ADDRESS_DAYS + 1)
    )
    # Then: the address's lock holds for this username too
    assert _token(Client(), user.username, PASSWORD).status_code == 429


@pytest.mark.parametrize("num_proxies", [0, 1])
def test_a_forged_forwarded_for_header_does_not_dodge_the_address_lock(
    settings: Any, num_proxies: int
) -> None:
    from rest_framework.settings import api_settings

    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": num_proxies}
    api_settings.reload()
    settings.STEPLAB_LOGIN_ADDRESS_FAILURE_LIMIT = 5
    try:
        proxy_addr = "10.0.0.1" if num_proxies else OFFICE

        def attempt(username: str, password: str, forged: str, client_ip: str = OFFICE) -> int:
            # Behind one proxy, the proxy appends the address it saw to what the client sent.
            forwarded = f"{forged}, {client_ip}" if num_proxies else forged
            return (
                Client()
                .post(
                    TOKEN_URL,
                    {"username": username, "password": password},
                    content_type="application/json",
                    REMOTE_ADDR=proxy_addr,
                    HTTP_X_FORWARDED_FOR=forwarded,
                )
                .status_code
            )

        user = UserFactory()
        # Given: a guesser sending a new forged address with every wrong password
        codes = [attempt(f"nobody-{i}", "wrong", f"192.0.2.{i}") for i in range(5)]
        assert codes == [400] * 4 + [429]
        # Then: the lock still falls on the one real client address
        assert attempt(user.username, PASSWORD, "192.0.2.99") == 429
        if num_proxies:
            # And behind the proxy, another real client is not locked
            assert attempt(user.username, PASSWORD, "", client_ip="198.51.100.2") == 200
    finally:
        api_settings.reload()


# ------------------------------------------------- whose failures count against whom

STRANGER = "198.51.100.66"


@pytest.mark.parametrize("variant", ["LENA", "Lena", "lEna", " lena ", "ｌｅｎａ"])
def test_letter_case_spaces_and_width_do_not_buy_more_guesses(variant: str) -> None:
    # Given: a guesser who used up the limit on one spelling of a username
    UserFactory(username="lena")
    for i in range(settings.AXES_FAILURE_LIMIT):
        _token(Client(), "lena", f"guess-{i}")
    # When: they go on with another spelling, which a directory compares as the same name
    answer = _token(Client(), variant, "guess-more")
    # Then: it is the same count, already at its limit
    assert answer.status_code == 429


def test_a_stranger_s_guesses_do_not_lock_the_owner_out() -> None:
    # Given: an account its owner uses from the office, and a stranger elsewhere who
    # guesses its password well past the limit
    user = UserFactory()
    assert _token(Client(), user.username, PASSWORD).status_code == 200
    codes = [_token(Client(), user.username, f"g-{i}", STRANGER).status_code for i in range(15)]
    assert codes[-1] == 429
    # Then: the stranger is refused even the right password, the owner is not
    assert _token(Client(), user.username, PASSWORD, STRANGER).status_code == 429
    assert _token(Client(), user.username, PASSWORD).status_code == 200
    assert _login_page(Client(), user.username, PASSWORD).status_code == 302


def test_guesses_spread_over_many_addresses_meet_a_site_wide_bound_per_account(
    settings: Any,
) -> None:
    settings.STEPLAB_LOGIN_USERNAME_FAILURE_LIMIT = 24
    # Given: an account its owner signed in to from the office
    user = UserFactory()
    assert _token(Client(), user.username, PASSWORD).status_code == 200
    # When: guesses come from many addresses, each below its own limit, 24 in all
    for net in range(8):
        for i in range(3):
            _token(Client(), user.username, f"g-{i}", f"192.0.2.{net + 1}")
    # Then: the account is refused at every address it has not signed in from lately,
    # even with the right password, and still signs in from the office
    assert _token(Client(), user.username, PASSWORD, "192.0.2.200").status_code == 429
    assert _token(Client(), user.username, PASSWORD).status_code == 200
