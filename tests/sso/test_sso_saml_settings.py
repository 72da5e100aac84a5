"""SAML's environment (config/sso_saml.py): what STEPLAB_SAML_PROVIDERS becomes, and that a
mistake in it (a certificate that does not parse included) stops the process at start-up
with the variable named rather than failing someone's sign-in later."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from config import sso, sso_saml
from tests.saml_idp import key_and_certificate
from tests.sso.settings_process import settings_read

KEY_PEM, CERT_PEM = key_and_certificate("settings")
OTHER_KEY = key_and_certificate("other")[0].decode()
CERT_BODY = "".join(CERT_PEM.decode().splitlines()[1:-1])
ACME = {
    "id": "acme",
    "name": "Acme SSO",
    "entity_id": "https://idp.acme.example/saml",
    "sso_url": "https://idp.acme.example/saml/sso",
    "x509cert": CERT_PEM.decode(),
}


def _raw(*providers: dict[str, Any]) -> str:
    return json.dumps(list(providers))


def test_a_provider_becomes_an_allauth_app_and_a_form_action() -> None:
    raw = _raw({**ACME, "role_map": {"leads": {"project": "Demo", "role": "lead"}}})
    (provider,) = sso_saml.saml_providers(raw)
    # The certificate is kept as the base64 of its DER, as in the IdP's metadata
    assert provider["x509certs"] == [CERT_BODY]
    assert provider["role_attribute"] == "groups"
    assert provider["role_map"] == {"leads": [("Demo", "lead")]}
    (app,) = sso_saml.allauth_saml([provider])["saml"]["APPS"]
    # The organization's slug in its URLs, and the provider its accounts are kept under
    assert app["client_id"] == "acme" and app["provider_id"] == "acme"
    assert app["settings"]["idp"] == {
        "entity_id": "https://idp.acme.example/saml",
        "sso_url": "https://idp.acme.example/saml/sso",
        "x509cert": CERT_BODY,
    }
    assert app["settings"]["advanced"] == {"strict": True, "reject_idp_initiated_sso": True}
    assert (
        app["settings"]["attribute_mapping"]["username"][0] == "urn:oid:0.9.2342.19200300.100.1.1"
    )
    assert sso_saml.saml_origins([provider]) == ["https://idp.acme.example"]


def test_the_bare_certificate_an_attribute_mapping_and_an_sp_entity_id() -> None:
    (provider,) = sso_saml.saml_providers(
        _raw(
            {
                **ACME,
                "x509cert": CERT_BODY,
                "attribute_mapping": {"username": "email"},
                "sp_entity_id": "https://steplab.acme.example/saml",
                "role_attribute": "http://schemas.microsoft.com/ws/2008/06/identity/claims/groups",
            }
        )
    )
    assert provider["x509certs"] == [CERT_BODY]
    (app,) = sso_saml.allauth_saml([provider])["saml"]["APPS"]
    assert app["settings"]["attribute_mapping"]["username"] == ["email"]
    assert app["settings"]["attribute_mapping"]["email"][0] == "urn:oid:0.9.2342.19200300.100.1.3"
    assert app["settings"]["sp"] == {"entity_id": "https://steplab.acme.example/saml"}


def test_several_certificates_a_metadata_url_and_steplabs_own_key() -> None:
    _, next_cert = key_and_certificate("next")
    rollover, by_metadata = sso_saml.saml_providers(
        _raw(
            {
                **ACME,
                "x509cert": [CERT_PEM.decode(), next_cert.decode()],
                "sp_x509cert": CERT_PEM.decode(),
                "sp_private_key": KEY_PEM.decode(),
                "authn_requests_signed": True,
                "want_assertions_encrypted": True,
            },
            {"id": "beta", "name": "Beta", "metadata_url": "https://idp.beta.example/md"},
        )
    )
    assert rollover["x509certs"] == [CERT_BODY, "".join(next_cert.decode().splitlines()[1:-1])]
    acme, beta = sso_saml.allauth_saml([rollover, by_metadata])["saml"]["APPS"]
    assert acme["settings"]["advanced"] == {
        "strict": True,
        "reject_idp_initiated_sso": True,
        "x509cert": CERT_PEM.decode(),
        "private_key": KEY_PEM.decode(),
        "authn_request_signed": True,
        "want_assertion_encrypted": True,
    }
    assert beta["settings"]["idp"] == {
        "metadata_url": "https://idp.beta.example/md",
        "entity_id": None,
    }
    assert sso_saml.saml_origins([by_metadata]) == ["https://idp.beta.example"]


def test_nothing_configured_is_nothing() -> None:
    assert sso_saml.saml_providers(" ") == []
    assert sso_saml.allauth_saml([]) == {}


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (_raw({**ACME, "x509cert": ""}), "lacks ['x509cert']"),
        (_raw({**ACME, "x509cert": "MIIBnot-a-cert"}), "not an X.509 certificate"),
        (_raw({**ACME, "x509cert": CERT_BODY[:-40]}), "not an X.509 certificate"),
        (_raw({**ACME, "id": "Acme Corp"}), "id 'Acme Corp'"),
        (_raw(ACME, {**ACME, "name": "Again"}), "'acme' twice"),
        (_raw({**ACME, "sso_url": "idp.acme.example/sso"}), "sso_url"),
        (_raw({**ACME, "role_map": {"x": {"project": "P", "role": "boss"}}}), "role 'boss'"),
        (_raw({**ACME, "attribute_mapping": {"groups": "g"}}), "attribute_mapping"),
        (_raw({**ACME, "x509cert": [CERT_BODY, "x"]}), "acme]: x509cert[1] is not an X.509"),
        (_raw({**ACME, "x509cert": []}), "lacks ['x509cert']"),
        (_raw({"id": "acme", "name": "A", "metadata_url": "http://idp.example/md"}), "https"),
        (_raw({**ACME, "metadata_url": "https://idp.acme.example/md"}), "one or the other"),
        (_raw({**ACME, "authn_requests_signed": True}), "need both sp_x509cert and sp_priv"),
        (_raw({**ACME, "want_assertions_encrypted": "yes"}), "true or false"),
        (_raw({**ACME, "sp_x509cert": "/nope.crt", "sp_private_key": "/nope.key"}), "nope.crt"),
        (_raw({**ACME, "sp_x509cert": CERT_PEM.decode(), "sp_private_key": OTHER_KEY}), "not sp_x"),
        ('"acme"', "list of objects"),
        ("[{id: acme}]", "not valid JSON"),
    ],
)
def test_a_bad_provider_is_refused(raw: str, says: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="STEPLAB_SAML_PROVIDERS") as refused:
        sso_saml.saml_providers(raw)
    assert says in str(refused.value)


def test_an_oidc_and_a_saml_provider_never_share_an_id() -> None:
    oidc = sso.oidc_providers(
        '[{"id": "acme", "name": "x", "server_url": "https://i", "client_id": "c"}]'
    )
    with pytest.raises(ImproperlyConfigured, match="both use the id"):
        sso_saml.ids_distinct(oidc, sso_saml.saml_providers(_raw(ACME)))
    sso_saml.ids_distinct(oidc, sso_saml.saml_providers(_raw({**ACME, "id": "acme-saml"})))


def test_the_settings_read_the_environment() -> None:
    read = settings_read(
        {"STEPLAB_SAML_PROVIDERS": _raw(ACME), "STEPLAB_LOCAL_PASSWORDS": "0"},
        "from django.conf import settings as s; "
        "print(s.STEPLAB_LOCAL_PASSWORDS, s.CONTENT_SECURITY_POLICY['DIRECTIVES']"
        "['form-action'], s.SOCIALACCOUNT_PROVIDERS['saml']['APPS'][0]['name'])",
    )
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip() == "False [\"'self'\", 'https://idp.acme.example'] Acme SSO"


@pytest.mark.parametrize("x509cert", ["x", [CERT_BODY, "x"]])
def test_a_mistake_stops_start_up(x509cert: Any) -> None:
    read = settings_read({"STEPLAB_SAML_PROVIDERS": _raw({**ACME, "x509cert": x509cert})}, "")
    assert read.returncode != 0
    assert "ImproperlyConfigured" in read.stderr and "STEPLAB_SAML_PROVIDERS[acme]" in read.stderr
    assert ("x509cert[1]" in read.stderr) is isinstance(x509cert, list)
