"""The steps of a SAML sign-in as the flow tests take them: Django's test client plays
the browser on Steplab's side (at http://localhost, the host the SP's URLs are built
with) and an HTTP client on the IdP's (tests/saml_idp.py)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.test import Client

from tests.loopback_http import sign_in_button_pressed
from tests.saml_idp import MAIL, UID, SamlIdp, posted_form


def person(name: str, *groups: str) -> dict[str, Any]:
    """Someone at Acme's IdP, with a persistent NameID and these groups."""
    return {
        "name_id": f"{name}-id-at-idp",
        "attributes": {UID: [name], MAIL: [f"{name}@acme.example"], "groups": list(groups)},
    }


def steplab_client() -> Client:
    return Client(HTTP_HOST="localhost")


def at_idp(client: Client, idp: SamlIdp, someone: dict[str, Any], org: str = "acme") -> Any:
    """The button's POST and the IdP's page: returns where that page posts, and what."""
    idp.person = someone
    page = sign_in_button_pressed(
        client, f"/accounts/saml/{org}/login/", f"{idp.url}/sso?SAMLRequest="
    )
    assert page.status_code == 200, page.text
    return posted_form(page.text)


def post_back(client: Client, action: str, fields: dict[str, str]) -> Any:
    """The IdP's page posts to the assertion consumer, which finishes on its next URL; a
    response it does not take (too large, not XML, not signed by the IdP, for another
    audience) is refused there, and that answer is returned."""
    consumed = client.post(urlsplit(action).path, fields)
    if consumed.status_code != 302:
        return consumed
    return client.get(consumed["Location"])


def sign_in(client: Client, idp: SamlIdp, someone: dict[str, Any], org: str = "acme") -> Any:
    return post_back(client, *at_idp(client, idp, someone, org))


def failed(landed: Any, client: Client) -> bool:
    """Steplab's "Sign-in failed" page, and no one signed in."""
    return "Sign-in failed" in landed.content.decode() and "_auth_user_id" not in client.session
