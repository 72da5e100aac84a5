"""SAML single sign-on read from the environment (STEPLAB_SAML_PROVIDERS; settings,
"Single sign-on"; README, "SAML").

Each provider is one organization's identity provider, with its own URLs under
/accounts/saml/<id>/ and its own role map: an organization's IdP vouches for its own
people only, so one IdP's assertion never grants a role through another's groups. Plain
Python like config/sso.py: a mistake stops start-up with the variable named."""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from config import sso

_NAME = "STEPLAB_SAML_PROVIDERS"
# The id is the organization's slug in its URLs (/accounts/saml/<id>/acs/ ...).
_PROVIDER_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
_PEM = re.compile(r"-----BEGIN CERTIFICATE-----(.*?)-----END CERTIFICATE-----", re.S)
# Which SAML attributes fill the account: django-allauth's defaults (e-mail and names by
# their OIDs and Microsoft's claim URIs) with the username from the LDAP uid OID too.
# A provider's "attribute_mapping" replaces any of these keys.
ATTRIBUTE_MAPPING: dict[str, list[str]] = {
    "uid": ["urn:oasis:names:tc:SAML:attribute:subject-id"],
    "username": ["urn:oid:0.9.2342.19200300.100.1.1", "http://schemas.auth0.com/nickname"],
    "email": [
        "urn:oid:0.9.2342.19200300.100.1.3",
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress",
    ],
    "first_name": [
        "urn:oid:2.5.4.42",
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/givenname",
    ],
    "last_name": [
        "urn:oid:2.5.4.4",
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/surname",
    ],
}


def _certificate(where: str, raw: Any) -> str:
    """The IdP's signing certificate as the base64 of its DER (what python3-saml and the
    IdP's metadata hold), from a PEM or that base64 alone; one that does not parse stops
    start-up rather than every sign-in."""
    from cryptography import x509

    text = str(raw or "")
    found = _PEM.search(text)
    body = re.sub(r"\s+", "", found.group(1) if found else text)
    try:
        x509.load_der_x509_certificate(base64.b64decode(body, validate=True))
    except (ValueError, binascii.Error) as exc:
        raise ImproperlyConfigured(
            f"{where}: x509cert is not an X.509 certificate (PEM, or the base64 of "
            f"<ds:X509Certificate> from the IdP's metadata): {exc}"
        ) from exc
    return body


def _url(where: str, key: str, raw: Any) -> str:
    url = str(raw or "")
    if urlsplit(url).scheme not in {"http", "https"} or not urlsplit(url).netloc:
        raise ImproperlyConfigured(f"{where}: {key} {url!r} is not an http(s) URL.")
    return url


def _attribute_mapping(where: str, raw: Any) -> dict[str, list[str]]:
    mapping = {key: list(names) for key, names in ATTRIBUTE_MAPPING.items()}
    if raw is None:
        return mapping
    if not isinstance(raw, dict) or set(raw) - set(ATTRIBUTE_MAPPING):
        raise ImproperlyConfigured(
            f"{where}: attribute_mapping is an object with keys among {list(ATTRIBUTE_MAPPING)}."
        )
    for key, names in raw.items():
        mapping[key] = [str(n) for n in names] if isinstance(names, list) else [str(names)]
    return mapping


def _provider(item: Any, index: int) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise ImproperlyConfigured(f"{_NAME} must be a JSON list of objects.")
    provider_id = str(item.get("id") or "")
    where = f"{_NAME}[{provider_id or index}]"
    if not _PROVIDER_ID.match(provider_id):
        raise ImproperlyConfigured(
            f"{where}: id {provider_id!r} must be lower-case letters, digits, '-' or '_' "
            "(it is the organization's part of the SAML URLs)."
        )
    missing = [key for key in ("name", "entity_id", "sso_url", "x509cert") if not item.get(key)]
    if missing:
        raise ImproperlyConfigured(f"{where}: lacks {missing}.")
    role_map = item.get("role_map") or {}
    return {
        "id": provider_id,
        "name": str(item["name"]),
        "entity_id": str(item["entity_id"]),
        "sso_url": _url(where, "sso_url", item["sso_url"]),
        "x509cert": _certificate(where, item["x509cert"]),
        "sp_entity_id": str(item.get("sp_entity_id") or ""),
        "role_attribute": str(item.get("role_attribute") or "groups"),
        "role_map": sso.role_map(json.dumps(role_map), f"{where}.role_map"),
        "attribute_mapping": _attribute_mapping(where, item.get("attribute_mapping")),
    }


def saml_providers(raw: str) -> list[dict[str, Any]]:
    """STEPLAB_SAML_PROVIDERS: a JSON list of ``{"id", "name", "entity_id", "sso_url",
    "x509cert"}`` objects, each with an optional ``role_attribute`` (default "groups"),
    ``role_map`` (as an OIDC provider's), ``attribute_mapping`` and ``sp_entity_id``.
    Empty or unset: no SAML, and its URLs are 404."""
    if not raw.strip():
        return []
    try:
        items = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"{_NAME} is not valid JSON: {exc}") from exc
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        raise ImproperlyConfigured(f"{_NAME} must be a JSON list of objects.")
    providers: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        provider = _provider(item, index)
        if provider["id"] in {p["id"] for p in providers}:
            raise ImproperlyConfigured(f"{_NAME}: id {provider['id']!r} twice.")
        providers.append(provider)
    return providers


def ids_distinct(oidc: list[dict[str, Any]], saml: list[dict[str, Any]]) -> None:
    """An OIDC and a SAML provider never share an id: it names the provider of the
    accounts it makes (django-allauth's provider_id), which must be one."""
    shared = sorted({p["id"] for p in oidc} & {p["id"] for p in saml})
    if shared:
        raise ImproperlyConfigured(
            f"STEPLAB_OIDC_PROVIDERS and {_NAME} both use the id(s) {shared}."
        )


def allauth_saml(providers: list[dict[str, Any]]) -> dict[str, Any]:
    """SOCIALACCOUNT_PROVIDERS["saml"]: an app per organization, its client_id the slug
    in its URLs and its provider_id the id its accounts are kept under, so the same
    NameID at two organizations is two people. Responses must be signed by the IdP's
    certificate (python3-saml refuses one with no signature), answer a request Steplab
    made (IdP-initiated sign-in is refused), and are checked strictly: audience,
    recipient, destination, validity times."""
    apps = []
    for p in providers:
        app_settings: dict[str, Any] = {
            "idp": {
                "entity_id": p["entity_id"],
                "sso_url": p["sso_url"],
                "x509cert": p["x509cert"],
            },
            "attribute_mapping": p["attribute_mapping"],
            "advanced": {"strict": True, "reject_idp_initiated_sso": True},
        }
        if p["sp_entity_id"]:
            app_settings["sp"] = {"entity_id": p["sp_entity_id"]}
        apps.append(
            {
                "provider_id": p["id"],
                "name": p["name"],
                "client_id": p["id"],
                "settings": app_settings,
            }
        )
    return {"saml": {"APPS": apps}} if apps else {}


def saml_origins(providers: list[dict[str, Any]]) -> list[str]:
    """The IdPs' origins, for the Content-Security-Policy's form-action: the "Sign in
    with" button's POST is answered by a redirect to the IdP's SSO URL."""
    origins: list[str] = []
    for p in providers:
        parts = urlsplit(p["sso_url"])
        origin = f"{parts.scheme}://{parts.netloc}"
        if origin not in origins:
            origins.append(origin)
    return origins
