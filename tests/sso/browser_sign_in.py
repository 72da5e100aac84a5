"""A lead's first sign-in through an identity provider in the browser, as the SAML and
OIDC browser tests take it: project Demo with a lead of its own, Demo's page opened
signed out, the login page, the provider's button, and back on Demo's page signed in;
the home page then shows who and Demo with the badge "lead"."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from annotation.models import Project, Role
from tests.browser import ARTIFACTS, page_watched
from tests.factories import MembershipFactory, ProjectFactory


def demo_with_lead() -> Project:
    demo: Project = ProjectFactory(name="Demo")
    MembershipFactory(project=demo, role=Role.LEAD)
    return demo


def lead_signs_in(
    browser: Browser, base: str, demo: Project, button: str, username: str, shots: str
) -> None:
    """Signs in through ``button`` from Demo's page (no Content-Security-Policy violation
    on the way), back on Demo's page; the home page shows ``username`` and Demo's badge
    "lead". Screenshots ``<shots>-login.png`` and ``<shots>-signed-in.png`` go to
    tests/artifacts/."""
    ARTIFACTS.mkdir(exist_ok=True)
    with page_watched(browser=browser, width=1366, height=900, csp_errors=True) as page:
        page.goto(f"{base}/projects/{demo.pk}/")
        page.wait_for_url(f"{base}/login/**")
        page.screenshot(path=ARTIFACTS / f"{shots}-login.png")
        page.click(f"button:text-is('{button}')")
        page.wait_for_url(f"{base}/projects/{demo.pk}/")
        page.goto(f"{base}/")
        card = page.locator(".project-card", has_text="Demo")
        expect(card.locator(".badge")).to_have_text("lead")
        expect(page.locator("body")).to_contain_text(username)
        page.screenshot(path=ARTIFACTS / f"{shots}-signed-in.png")
