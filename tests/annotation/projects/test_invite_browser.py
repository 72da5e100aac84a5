"""A lead invites two annotators from the browser (Debian's chromium driven by Playwright
against pytest-django's live server, under the site's Content-Security-Policy), at a
laptop's 1366x768 and a phone's 390 px: one by a single invitation, one from a pasted
list (after a list with a bad line is refused line by line), and revokes a third. Each
annotator opens their link in a fresh browser, sets a password and lands on the project;
the revoked link says it was withdrawn; the lead sees both as members. Screenshots of
every step go to tests/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core import mail
from playwright.sync_api import Browser, Page, expect

from annotation.models import Invite, Membership, Role
from tests.browser import (
    ARTIFACTS,
    chromium_running,
    page_clipped_sideways,
    page_login,
    page_overflow,
    page_watched,
)
from tests.factories import MembershipFactory, ProjectFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WIDTHS = {"1366": (1366, 768), "390": (390, 844)}
PASSWORD = "a-Longer-one-42"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


def _shot(page: Page, name: str, width: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}-{width}.png"), full_page=True)


def _fits(page: Page) -> None:
    assert page_overflow(page) == [], "the page scrolls sideways"
    assert page_clipped_sideways(page) == [], "something is cut off"


def _link_of(page: Page, who: str) -> str:
    return page.locator(f'#invite-link-list li[data-who="{who}"] code').inner_text().strip()


def _invite_one_and_a_list(page: Page, width: str) -> dict[str, str]:
    """On the members page: one invitation, a refused list, a good list. The links."""
    one, two, gone = (f"{name}{width}@lab.example" for name in ("one", "two", "gone"))
    page.fill("#f-invite-who", one)
    page.fill("#f-invite-name", "Ann One")
    page.get_by_role("button", name="Create invitation", exact=True).click()
    expect(page.locator("#invite-link-list li")).to_have_count(1)
    expect(page.locator("#invite-link-list li").first).to_contain_text("e-mailed")
    links = {"one": _link_of(page, one)}
    expect(page.locator("#pending tbody tr")).to_have_count(1)
    _fits(page)
    _shot(page, "invite_one", width)

    # A list with a bad line invites nobody and names the line
    page.fill("#f-invite-list", f"{two}, annotator, Ann Two\nnot-an-address@\n{gone},boss")
    page.get_by_role("button", name="Create invitations").click()
    errors = page.locator("#invite-error-list li")
    expect(errors).to_have_count(2)
    expect(errors.nth(0)).to_contain_text("Line 2")
    expect(errors.nth(1)).to_contain_text("Unknown role 'boss'")
    expect(page.locator("#pending tbody tr")).to_have_count(1)
    page.locator("#invite-errors").scroll_into_view_if_needed()
    _fits(page)
    _shot(page, "invite_list_refused", width)

    # Fixed, it invites both
    page.fill("#f-invite-list", f"{two}, annotator, Ann Two\n{gone}")
    page.get_by_role("button", name="Create invitations").click()
    expect(page.locator("#invite-link-list li")).to_have_count(2)
    assert page.locator("#invite-errors").is_hidden()
    links["two"], links["gone"] = _link_of(page, two), _link_of(page, gone)
    expect(page.locator("#pending tbody tr")).to_have_count(3)
    _fits(page)
    _shot(page, "invite_list", width)

    # The third is revoked from the pending list
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name=f"Revoke the invitation of {gone}").click()
    expect(page.locator("#pending tbody tr")).to_have_count(2)
    expect(page.locator("#invites-message")).to_contain_text("was revoked")
    _shot(page, "invite_pending", width)
    return links


def _join(browser: Browser, live_server: Any, link: str, username: str, width: str) -> None:
    """A fresh browser opens the link, chooses a username and a password."""
    w, h = WIDTHS[width]
    with page_watched(browser=browser, width=w, height=h, csp_errors=True) as fresh:
        fresh.goto(link)
        fresh.wait_for_selector("#invite-signup")
        assert "#" not in fresh.url, "the token stays in the address bar"
        expect(fresh.locator("h1")).to_contain_text("Join ")
        fresh.fill("#id_username", username)
        fresh.fill("#id_password1", "short")
        fresh.fill("#id_password2", "short")
        fresh.get_by_role("button", name="Create account and join").click()
        # (under the password itself, not under its confirmation)
        expect(fresh.locator("#errors-password1")).to_contain_text("too short")
        expect(fresh.locator("#errors-password2")).to_have_count(0)
        _fits(fresh)
        _shot(fresh, f"invite_signup_{username.rstrip('0123456789')}", width)
        fresh.fill("#id_password1", PASSWORD)
        fresh.fill("#id_password2", PASSWORD)
        fresh.get_by_role("button", name="Create account and join").click()
        fresh.wait_for_url(f"{live_server.url}/projects/*/")
        expect(fresh.locator(".messages")).to_contain_text(f"Welcome, {username}: you joined")
        _fits(fresh)
        _shot(fresh, f"invite_landed_{username.rstrip('0123456789')}", width)


@pytest.mark.parametrize("width", list(WIDTHS))
def test_a_lead_invites_two_annotators_who_join_from_their_links(
    live_server: Any, browser: Browser, width: str
) -> None:
    # Given: a lead alone in their project
    project = ProjectFactory(name=f"Invited lab {width}")
    lead = MembershipFactory(project=project, role=Role.LEAD, user__username=f"lead{width}").user
    w, h = WIDTHS[width]
    with page_watched(browser=browser, width=w, height=h, csp_errors=True) as page:
        page_login(page=page, base_url=live_server.url, username=lead.username)
        page.goto(f"{live_server.url}/projects/{project.pk}/members/")
        page.wait_for_selector("#project-members[data-state=ready]")
        expect(page.locator("#pending-empty")).to_be_visible()

        # When: they invite one person, then a list, and revoke one of the list
        links = _invite_one_and_a_list(page, width)
        assert len(mail.outbox) == 3
        assert all(any(link in m.body for m in mail.outbox) for link in links.values())

        # ...and each annotator opens their link in a fresh browser and sets a password
        _join(browser, live_server, links["one"], f"annone{width}", width)
        _join(browser, live_server, links["two"], f"anntwo{width}", width)

        # Then: the revoked link says so
        with page_watched(browser=browser, width=w, height=h, csp_errors=True) as fresh:
            fresh.goto(links["gone"])
            expect(fresh.locator("h1")).to_have_text("This invitation was withdrawn")
            _fits(fresh)
            _shot(fresh, "invite_revoked", width)

        # And: the lead sees both as annotators, and no invitation left pending
        page.reload()
        page.wait_for_selector("#project-members[data-state=ready]")
        for name in (f"annone{width}", f"anntwo{width}"):
            row = page.locator(f'#members tbody tr[data-username="{name}"]')
            expect(row).to_have_count(1)
            expect(row.locator("select")).to_have_value(Role.ANNOTATOR)
        expect(page.locator("#pending-empty")).to_be_visible()
        _fits(page)
        _shot(page, "invite_members_after", width)
    roles = dict(Membership.objects.filter(project=project).values_list("user__username", "role"))
    assert roles == {
        lead.username: Role.LEAD,
        f"annone{width}": Role.ANNOTATOR,
        f"anntwo{width}": Role.ANNOTATOR,
    }
    assert Invite.objects.filter(project=project, accepted_at__isnull=False).count() == 2
