"""Signing in through SAML in the browser (Debian's chromium driven by Playwright against
pytest-django's live server), with a real identity provider on loopback
(tests/saml_idp.py) that signs its assertions: a member of Acme's "acme-leads" group
clicks "Sign in with Acme SSO" on the login page, goes to the IdP, whose page posts the
signed response back to Acme's assertion consumer (from another site: 127.0.0.1 to
localhost, so the session cookie does not travel with that POST, as in production), and
lands on the page they asked for, signed in as a new account, lead of the project the
group is mapped to; no Content-Security-Policy violation on the way (the IdP's origin is
a form-action). Screenshots go to tests/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Browser, expect

from annotation.models import Membership, Role
from tests.browser import ARTIFACTS, chromium_running, page_watched
from tests.factories import MembershipFactory, ProjectFactory
from tests.saml_idp import MAIL, UID, SamlIdp, saml_configure

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


@pytest.fixture
def idp(settings: Any) -> Iterator[SamlIdp]:
    provider = SamlIdp("acme").start()
    roles = {
        "acme-leads": {"project": "Demo", "role": "lead"},
        "acme-annotators": {"project": "Demo", "role": "annotator"},
    }
    saml_configure(settings, [provider.entry("acme", "Acme SSO", role_map=roles)])
    yield provider
    provider.stop()


def test_a_lead_signs_in_through_the_organizations_idp(
    live_server: Any, browser: Browser, idp: SamlIdp
) -> None:
    # Given: project Demo, and Lena at Acme's IdP, in its group acme-leads
    demo = ProjectFactory(name="Demo")
    MembershipFactory(project=demo, role=Role.LEAD)
    idp.person = {
        "name_id": "lena-at-acme",
        "attributes": {
            UID: ["lena"],
            MAIL: ["lena@acme.example"],
            "groups": ["acme-leads", "everyone"],
        },
    }
    base = live_server.url
    ARTIFACTS.mkdir(exist_ok=True)
    with page_watched(browser=browser, width=1366, height=900, csp_errors=True) as page:
        # When: she opens Steplab and clicks her organization's button
        page.goto(f"{base}/projects/{demo.pk}/")
        page.wait_for_url(f"{base}/login/**")
        page.screenshot(path=ARTIFACTS / "saml-login.png")
        page.click("button:text-is('Sign in with Acme SSO')")

        # Then: through the IdP and back, she lands on the page she asked for, signed in,
        # as the lead of Demo
        page.wait_for_url(f"{base}/projects/{demo.pk}/")
        page.goto(f"{base}/")
        card = page.locator(".project-card", has_text="Demo")
        expect(card.locator(".badge")).to_have_text("lead")
        expect(page.locator("body")).to_contain_text("lena")
        page.screenshot(path=ARTIFACTS / "saml-signed-in.png")
    assert idp.requests[0]["acs"] == f"{base}/accounts/saml/acme/acs/"
    user = User.objects.get(username="lena")
    assert Membership.objects.get(project=demo, user=user).role == Role.LEAD
