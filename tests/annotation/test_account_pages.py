"""A user's own account from the pages: every user changes their own password, and the
Admin link shows only to those the admin lets do something."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_user_changes_their_own_password_with_the_old_one() -> None:
    user = UserFactory(username="ann")
    client = _client(user)
    assert client.get("/password/").status_code == 200

    # A wrong old password changes nothing and says why
    wrong = client.post(
        "/password/",
        {
            "old_password": "nope",
            "new_password1": "a-Longer-one-42",
            "new_password2": "a-Longer-one-42",
        },
    )
    assert (
        wrong.status_code == 200 and b"Your old password was entered incorrectly" in wrong.content
    )
    # The right one changes it, keeps this session and leads to the done page
    done = client.post(
        "/password/",
        {
            "old_password": "pass-1234",
            "new_password1": "a-Longer-one-42",
            "new_password2": "a-Longer-one-42",
        },
    )
    assert done.status_code == 302 and done["Location"] == "/password/done/"
    assert client.get("/password/done/").status_code == 200
    user.refresh_from_db()
    assert user.check_password("a-Longer-one-42")
    # Signed-out visitors are sent to sign in
    assert Client().get("/password/").status_code == 302


@pytest.mark.parametrize(
    ("kind", "shows_admin"),
    [
        ("annotator", False),
        ("staff without permissions", False),
        ("staff", True),
        ("superuser", True),
    ],
)
def test_the_admin_link_shows_only_to_those_who_can_use_the_admin(
    kind: str, shows_admin: bool
) -> None:
    user = UserFactory(is_staff=kind != "annotator", is_superuser=kind == "superuser")
    if kind == "staff":
        user.user_permissions.add(Permission.objects.get(codename="view_project"))
    page = _client(user).get("/")
    assert page.status_code == 200
    assert (b'href="/admin/"' in page.content) is shows_admin
    assert b'href="/password/"' in page.content


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_changing_the_password_in_a_browser_on_a_phone(live_server: Any) -> None:
    from tests.browser import ARTIFACTS, chromium_running, page_login, page_watched

    UserFactory(username="ann")
    with (
        chromium_running() as browser,
        page_watched(browser=browser, width=390, height=844, csp_errors=True) as page,
    ):
        page_login(page=page, base_url=live_server.url, username="ann")
        page.click("a.whoami")
        page.wait_for_url(f"{live_server.url}/password/")
        page.fill("input[name=old_password]", "pass-1234")
        page.fill("input[name=new_password1]", "a-Longer-one-42")
        page.fill("input[name=new_password2]", "a-Longer-one-42")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "password-change-390.png"), full_page=True)
        page.click("form.stacked-form button[type=submit]")
        page.wait_for_url(f"{live_server.url}/password/done/")
        assert "Password changed" in page.locator("h1").inner_text()
        # The form fits the phone's width
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
