"""An annotator manages their API tokens in the browser (Debian's chromium driven by
Playwright against pytest-django's live server, under the site's
Content-Security-Policy), at a laptop's 1366x768 and a phone's 390 px: the page is one
click from the navigation; a read-only token is made (its key shown once), reads the API
and is refused a write; the list shows its use; a full token ends when the password is
changed on the password page, and says so; revoking one takes it off the list and out of
the API. Screenshots go to tests/artifacts/."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from annotation.models import ApiToken, Role
from tests.browser import (
    ARTIFACTS,
    PASSWORD,
    chromium_running,
    page_login,
    page_overflow,
    page_watched,
)
from tests.factories import ChainFactory, MembershipFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NEW_PASSWORD = "a-Longer-one-42"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


def _call(base_url: str, path: str, key: str, method: str = "GET") -> int:
    """The status of an API call made with the token ``key``, as a script makes it."""
    request = urllib.request.Request(
        f"{base_url}{path}",
        method=method,
        headers={"Authorization": f"Token {key}", "Accept": "application/json"},
        data=b"{}" if method == "POST" else None,
    )
    if method == "POST":
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            json.loads(response.read() or b"null")
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def _make(page: Page, name: str, scope: str) -> str:
    page.fill("#f-token-name", name)
    page.select_option("#f-token-scope", scope)
    page.click("#btn-token-new")
    expect(page.locator("#token-made-name")).to_have_text(name)
    key = page.locator("#token-made-key").inner_text()
    expect(page.locator(f"#tokens-table tbody tr td.token-name:text-is('{name}')")).to_be_visible()
    return key


def _row(page: Page, name: str) -> Any:
    return page.locator(
        "#tokens-table tbody tr", has=page.locator(f"td.token-name:text-is('{name}')")
    )


@pytest.mark.parametrize(("width", "height"), [(1366, 768), (390, 844)])
def test_an_annotator_makes_sees_and_revokes_tokens(
    live_server: Any, browser: Browser, width: int, height: int
) -> None:
    # Given an annotator of a project with work in it
    member = MembershipFactory(role=Role.ANNOTATOR)
    ChainFactory(project=member.project)
    user, base = member.user, live_server.url
    with page_watched(browser=browser, width=width, height=height, csp_errors=True) as page:
        page_login(page=page, base_url=base, username=user.username)

        # When she follows "API tokens" in the navigation, she holds none
        page.click("nav.topnav a:text-is('API tokens')")
        page.wait_for_selector("#tokens[data-state=ready]")
        expect(page.locator("#tokens-empty")).to_be_visible()

        # When she makes a read-only token, its key is shown once, and it reads the API
        # but may not take work (403)
        reader = _make(page, "nightly export", "read")
        assert len(reader) == 40
        assert _call(base, "/api/v1/projects/", reader) == 200
        next_path = f"/api/v1/projects/{member.project_id}/assignments/next/"
        assert _call(base, next_path, reader, method="POST") == 403

        # ...and a full one, which takes work
        writer = _make(page, "labeling script", "full")
        assert _call(base, next_path, writer, method="POST") == 200

        # Then the list shows both, with their access, and the read-only one's use
        page.reload()
        page.wait_for_selector("#tokens[data-state=ready]")
        expect(page.locator("#token-made")).to_be_hidden()  # the key is not shown again
        row = _row(page, "nightly export")
        expect(row).to_contain_text("Read only")
        expect(row).to_contain_text(f"{reader[:8]}…")
        expect(row).not_to_contain_text("never")
        expect(_row(page, "labeling script")).to_contain_text("Full access")
        assert page_overflow(page) == []
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"tokens-{width}.png"), full_page=True)

        # When she revokes the read-only token, it leaves the list and the API
        page.once("dialog", lambda dialog: dialog.accept())
        _row(page, "nightly export").get_by_role("button", name="Revoke nightly export").click()
        expect(_row(page, "nightly export")).to_have_count(0)
        assert _call(base, "/api/v1/projects/", reader) == 401

        # When she changes her password, the full token ends, and the page says so
        page.goto(f"{base}/password/")
        page.fill("input[name=old_password]", PASSWORD)
        page.fill("input[name=new_password1]", NEW_PASSWORD)
        page.fill("input[name=new_password2]", NEW_PASSWORD)
        page.click("main form button[type=submit]")
        page.wait_for_url(f"{base}/password/done/")
        assert _call(base, "/api/v1/projects/", writer) == 401
        page.click("nav.topnav a:text-is('API tokens')")
        page.wait_for_selector("#tokens[data-state=ready]")
        expect(_row(page, "labeling script")).to_contain_text("Ended: password changed")
        page.screenshot(path=str(ARTIFACTS / f"tokens-ended-{width}.png"), full_page=True)
    assert ApiToken.objects.filter(user=user).count() == 1
