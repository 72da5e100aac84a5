"""Signing in through LDAP in the browser (Debian's chromium driven by Playwright against
pytest-django's live server), with a real directory (Debian's slapd, tests/ldap_server.py):
Lena, in the directory's group lab-leads, opens a project, types her directory username
and password into the login form, and lands on the project signed in as a new account,
lead of the project the group is mapped to; no Content-Security-Policy violation on the
way. Local passwords are off, so the form is there for the directory only.
Screenshots go to tests/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, expect

from annotation.models import Membership, Role
from tests.browser import ARTIFACTS, chromium_running, page_watched
from tests.factories import MembershipFactory, ProjectFactory
from tests.ldap_server import LdapServer, password_of

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


def test_a_lead_signs_in_with_the_directory(
    live_server: Any, browser: Browser, ldap_server: LdapServer, settings: Any
) -> None:
    # Given: project Demo, LDAP on with local passwords off, Lena in lab-leads
    ldap_server.configure(settings, STEPLAB_LDAP_NAME="Lab directory")
    settings.STEPLAB_LOCAL_PASSWORDS = False
    demo = ProjectFactory(name="Demo")
    MembershipFactory(project=demo, role=Role.LEAD)
    base = live_server.url
    ARTIFACTS.mkdir(exist_ok=True)
    with page_watched(browser=browser, width=1366, height=900, csp_errors=True) as page:
        # When: she opens the project and logs in with her directory account
        page.goto(f"{base}/projects/{demo.pk}/")
        page.wait_for_url(f"{base}/login/**")
        expect(page.get_by_text("Log in with your Lab directory username")).to_be_visible()
        page.fill("input[name=username]", "lena")
        page.fill("input[name=password]", "wrong")
        page.click("button:text-is('Log in')")
        expect(page.locator(".form-errors")).to_be_visible()
        page.fill("input[name=username]", "lena")
        page.fill("input[name=password]", password_of("lena"))
        page.screenshot(path=ARTIFACTS / "ldap-login.png")
        page.click("button:text-is('Log in')")

        # Then: she lands on the page she asked for, signed in, as the lead of Demo
        page.wait_for_url(f"{base}/projects/{demo.pk}/")
        page.goto(f"{base}/")
        card = page.locator(".project-card", has_text="Demo")
        expect(card.locator(".badge")).to_have_text("lead")
        page.screenshot(path=ARTIFACTS / "ldap-signed-in.png")
    user = User.objects.get(username="lena")
    assert Membership.objects.get(project=demo, user=user).role == Role.LEAD
