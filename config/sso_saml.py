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

# Hosts a metadata URL may reach over plain http (tests on loopback).
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def _certificate(where: str, raw: Any) -> str:
    """An IdP's signing certificate as the base64 of its DER (what python3-saml and the
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
            f"{where} is not an X.509 certificate (PEM, or the base64 of "
            f"<ds:X509Certificate> from the IdP's metadata): {exc}"
        ) from exc
    return body


def _certificates(where: str, raw: Any) -> list[str]:
    """``x509cert``: one certificate, or a list of them while the IdP rolls its key over
    (a response signed by any of them is taken), each named by its index if it is bad."""
    if not isinstance(raw, list):
        return [_certificate(f"{where}: x509cert", raw)]
    return [_certificate(f"{where}: x509cert[{i}]", cert) for i, cert in enumerate(raw)]


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


def _metadata_url(where: str, raw: Any) -> str:
    """The IdP's metadata URL: https, since whoever can change the metadata in transit
    chooses the certificate Steplab trusts (plain http only on loopback, for tests)."""
    url = _url(where, "metadata_url", raw)
    parts = urlsplit(url)
    if parts.scheme != "https" and parts.hostname not in LOOPBACK_HOSTS:
        raise ImproperlyConfigured(
            f"{where}: metadata_url {url!r} must be https (the metadata names the "
            "certificate that is trusted)."
        )
    return url


def _pem(where: str, key: str, raw: Any) -> str:
    """A PEM given inline, or the path of a file holding it (a mounted secret)."""
    text = str(raw or "")
    if "-----BEGIN" in text:
        return text
    try:
        with open(text, encoding="ascii") as pem_file:
            return pem_file.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ImproperlyConfigured(
            f"{where}: {key} is neither a PEM nor a readable PEM file: {exc}"
        ) from exc


def _sp_credentials(where: str, item: dict[str, Any]) -> dict[str, Any]:
    """Steplab's own key and certificate at this IdP (``sp_private_key``, ``sp_x509cert``,
    both or neither), which sign its AuthnRequests (``authn_requests_signed``) and
    decrypt the IdP's assertions (``want_assertions_encrypted``)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    flags: dict[str, bool] = {}
    for flag in ("authn_requests_signed", "want_assertions_encrypted"):
        value = item.get(flag, False)
        if not isinstance(value, bool):
            raise ImproperlyConfigured(f"{where}: {flag} is true or false, not {value!r}.")
        flags[flag] = value
    given = [key for key in ("sp_x509cert", "sp_private_key") if item.get(key)]
    if not given and not any(flags.values()):
        return {**flags, "sp_x509cert": "", "sp_private_key": ""}
    if len(given) < 2:
        needs = [f for f, on in flags.items() if on] or given
        raise ImproperlyConfigured(f"{where}: {needs} need both sp_x509cert and sp_private_key.")
    cert_pem = _pem(where, "sp_x509cert", item["sp_x509cert"])
    key_pem = _pem(where, "sp_private_key", item["sp_private_key"])
    try:
        cert = x509.load_pem_x509_certificate(cert_pem.encode())
    except ValueError as exc:
        raise ImproperlyConfigured(f"{where}: sp_x509cert is not a PEM certificate.") from exc
    try:
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(
            f"{where}: sp_private_key is not an unencrypted PEM private key."
        ) from exc
    public = serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*public) != cert.public_key().public_bytes(*public):
        raise ImproperlyConfigured(f"{where}: sp_private_key is not sp_x509cert's key.")
    return {**flags, "sp_x509cert": cert_pem, "sp_private_key": key_pem}


def _idp(where: str, item: dict[str, Any]) -> dict[str, Any]:
    """Where the IdP's entity ID, SSO URL and certificates come from: its metadata URL
    (fetched when a sign-in needs them, annotation/sso_saml_idp.py), or the entry."""
    if item.get("metadata_url"):
        mixed = [key for key in ("sso_url", "x509cert") if item.get(key)]
        if mixed:
            raise ImproperlyConfigured(
                f"{where}: {mixed} come from metadata_url's metadata; give one or the other."
            )
        return {
            "metadata_url": _metadata_url(where, item["metadata_url"]),
            "entity_id": str(item.get("entity_id") or ""),
            "sso_url": "",
            "x509certs": [],
        }
    missing = [key for key in ("entity_id", "sso_url", "x509cert") if not item.get(key)]
    if missing:
        raise ImproperlyConfigured(f"{where}: lacks {missing} (or a metadata_url).")
    return {
        "metadata_url": "",
        "entity_id": str(item["entity_id"]),
        "sso_url": _url(where, "sso_url", item["sso_url"]),
        "x509certs": _certificates(where, item["x509cert"]),
    }


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
    if not item.get("name"):
        raise ImproperlyConfigured(f"{where}: lacks ['name'].")
    role_map = item.get("role_map") or {}
    return {
        "id": provider_id,
        "name": str(item["name"]),
        **_idp(where, item),
        **_sp_credentials(where, item),
        "sp_entity_id": str(item.get("sp_entity_id") or ""),
        "role_attribute": str(item.get("role_attribute") or "groups"),
        "role_map": sso.role_map(json.dumps(role_map), f"{where}.role_map"),
        "attribute_mapping": _attribute_mapping(where, item.get("attribute_mapping")),
    }


def saml_providers(raw: str) -> list[dict[str, Any]]:
    """STEPLAB_SAML_PROVIDERS: a JSON list of ``{"id", "name", "entity_id", "sso_url",
    "x509cert"}`` objects (``x509cert`` one certificate or a list; or ``{"id", "name",
    "metadata_url"}``), each with an optional ``role_attribute`` (default "groups"),
    ``role_map`` (as an OIDC provider's), ``attribute_mapping``, ``sp_entity_id``, and
    ``sp_x509cert``, ``sp_private_key``, ``authn_requests_signed``,
    ``want_assertions_encrypted``.
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
        # The IdP's part as allauth reads it; annotation/sso_saml_idp.py replaces it with
        # every certificate, or the metadata's, when python3-saml's settings are built.
        idp = (
            {"metadata_url": p["metadata_url"], "entity_id": p["entity_id"] or None}
            if p["metadata_url"]
            else {
                "entity_id": p["entity_id"],
                "sso_url": p["sso_url"],
                "x509cert": p["x509certs"][0],
            }
        )
        advanced: dict[str, Any] = {"strict": True, "reject_idp_initiated_sso": True}
        if p["sp_private_key"]:
            advanced.update(x509cert=p["sp_x509cert"], private_key=p["sp_private_key"])
        if p["authn_requests_signed"]:
            advanced["authn_request_signed"] = True
        if p["want_assertions_encrypted"]:
            advanced["want_assertion_encrypted"] = True
        app_settings: dict[str, Any] = {
            "idp": idp,
            "attribute_mapping": p["attribute_mapping"],
            "advanced": advanced,
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
    with" button's POST is answered by a redirect to the IdP's SSO URL (for an IdP known
    by its metadata URL, that URL's origin: the SSO URL is not known before a sign-in)."""
    origins: list[str] = []
    for p in providers:
        parts = urlsplit(p["sso_url"] or p["metadata_url"])
        origin = f"{parts.scheme}://{parts.netloc}"
        if origin not in origins:
            origins.append(origin)
    return origins
