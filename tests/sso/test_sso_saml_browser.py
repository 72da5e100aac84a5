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
from playwright.sync_api import Browser

from annotation.models import Membership, Role
from tests.browser import chromium_running
from tests.saml_idp import MAIL, UID, SamlIdp, saml_configure
from tests.sso.browser_sign_in import demo_with_lead, lead_signs_in

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
    demo = demo_with_lead()
    idp.person = {
        "name_id": "lena-at-acme",
        "attributes": {
            UID: ["lena"],
            MAIL: ["lena@acme.example"],
            "groups": ["acme-leads", "everyone"],
        },
    }
    base = live_server.url
    # When: she opens Demo, is sent to log in, clicks her organization's button
    # Then: through the IdP and back, she lands on Demo signed in, as the lead of Demo
    lead_signs_in(browser, live_server.url, demo, "Sign in with Acme SSO", "lena", "saml")
    assert idp.requests[0]["acs"] == f"{base}/accounts/saml/acme/acs/"
    user = User.objects.get(username="lena")
    assert Membership.objects.get(project=demo, user=user).role == Role.LEAD
