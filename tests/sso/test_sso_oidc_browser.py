"""Signing in through OpenID Connect in the browser (Debian's chromium driven by
Playwright against pytest-django's live server), with a real identity provider on
loopback (tests/oidc_provider.py): a member of the provider's "lab-leads" group clicks
"Sign in with Lab SSO" on the login page, goes through the provider and back, and lands
on their projects signed in as a new account, lead of the project the group is mapped to;
no Content-Security-Policy violation on the way (the provider's origin is a form-action).
With local passwords off the login page shows only the provider's button.
Screenshots go to tests/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, expect

from annotation.models import Membership, Role
from tests.browser import ARTIFACTS, chromium_running, page_watched
from tests.oidc_provider import OidcProvider
from tests.sso.browser_sign_in import demo_with_lead, lead_signs_in

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


@pytest.fixture
def idp(settings: Any) -> Iterator[OidcProvider]:
    provider = OidcProvider().start()
    provider.configure(
        settings,
        role_map={
            "lab-leads": {"project": "Demo", "role": "lead"},
            "lab-annotators": {"project": "Demo", "role": "annotator"},
        },
    )
    yield provider
    provider.stop()


def test_a_lead_signs_in_through_the_provider(
    live_server: Any, browser: Browser, idp: OidcProvider
) -> None:
    # Given: project Demo, and Lena at the provider, in its group lab-leads
    demo = demo_with_lead()
    idp.person = {
        "sub": "lena-at-idp",
        "preferred_username": "lena",
        "email": "lena@lab.example",
        "name": "Lena Lead",
        "groups": ["lab-leads", "everyone"],
    }
    # When: she opens Demo, is sent to log in, clicks the provider's button
    # Then: she lands on Demo signed in, as the lead of Demo
    lead_signs_in(browser, live_server.url, demo, "Sign in with Lab SSO", "lena", "sso")
    assert idp.refused == []
    user = User.objects.get(username="lena")
    assert Membership.objects.get(project=demo, user=user).role == Role.LEAD


def test_local_passwords_off_shows_only_the_provider(
    live_server: Any, browser: Browser, idp: OidcProvider, settings: Any
) -> None:
    settings.STEPLAB_LOCAL_PASSWORDS = False
    with page_watched(browser=browser, width=1366, height=900, csp_errors=True) as page:
        page.goto(f"{live_server.url}/login/")
        expect(page.locator("button:text-is('Sign in with Lab SSO')")).to_be_visible()
        expect(page.locator("input[name=password]")).to_have_count(0)
        page.screenshot(path=ARTIFACTS / "sso-login-no-passwords.png")
