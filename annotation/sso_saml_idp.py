"""What python3-saml is told of an organization's identity provider (README, "SAML"):
from its entry in STEPLAB_SAML_PROVIDERS, with every certificate it lists (a key
rollover: a response signed by any of them is taken), or from its metadata URL, fetched
with a timeout and kept in the cache.

django-allauth builds python3-saml's settings in one function, ``build_saml_config``,
and hands the IdP a single ``x509cert``; ``install()`` puts ``build_saml_config`` below
in its place (at start-up, from annotation/apps.py), which keeps allauth's settings for
the SP and the security options and replaces only the IdP's part.

The metadata: fetched at the first sign-in that needs it, then again after
``METADATA_REFRESH_SECONDS``. A refetch that fails or times out keeps the copy held and
is tried again after ``METADATA_RETRY_SECONDS``, so a slow or down metadata URL costs
one sign-in at most ``METADATA_TIMEOUT_SECONDS`` per retry period (the whole answer, not
each read; at most ``METADATA_MAX_BYTES``; redirects followed only to https), never
every sign-in.
With no copy held yet, the organization's sign-in fails (503) until the URL answers."""

from __future__ import annotations

import copy
import hashlib
import logging
import time
import urllib.error
import urllib.request
from http.client import HTTPMessage
from time import monotonic  # the fetch's deadline; tests move time.time alone
from typing import IO, Any
from urllib.parse import urlsplit

from allauth.socialaccount.providers.saml import utils as saml_utils
from allauth.socialaccount.providers.saml import views as saml_views
from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest
from onelogin.saml2.constants import OneLogin_Saml2_Constants
from onelogin.saml2.idp_metadata_parser import OneLogin_Saml2_IdPMetadataParser
from onelogin.saml2.xml_utils import OneLogin_Saml2_XML

from config.sso_saml import LOOPBACK_HOSTS

logger = logging.getLogger(__name__)

METADATA_TIMEOUT_SECONDS = 5
METADATA_REFRESH_SECONDS = 4 * 60 * 60
METADATA_RETRY_SECONDS = 5 * 60
# An IdP's metadata is a few kB; one with many certificates or entities some hundreds.
METADATA_MAX_BYTES = 1 << 20

_allauth_build_saml_config = saml_utils.build_saml_config
# The signing certificates of the IdP entity ``$entity``, as python3-saml's metadata
# parser reads them (an entity ID is data: an XPath variable, never spliced in).
_SIGNING_CERTS = (
    "//md:EntityDescriptor[@entityID=$entity]/md:IDPSSODescriptor"
    "/md:KeyDescriptor[not(contains(@use, 'encryption'))]"
    "/ds:KeyInfo/ds:X509Data/ds:X509Certificate"
)


class IdpMetadataUnavailable(Exception):
    """The IdP's metadata URL has not answered since start-up (no copy is held)."""


def _metadata_cache_key(provider: dict[str, Any]) -> str:
    where = f"{provider['metadata_url']} {provider['entity_id']}".encode()
    return "steplab.saml.metadata." + hashlib.sha256(where).hexdigest()


def _signing_listed(xml: bytes, entity_id: str, cert: str) -> bool:
    """Whether the metadata lists ``cert`` for signing (a KeyDescriptor whose use is not
    encryption alone) under the IdP ``entity_id`` (a federation's file lists several):
    python3-saml's parser hands a lone encryption certificate on as the IdP's
    ``x509cert``, which it then checks signatures with."""
    found = OneLogin_Saml2_XML.to_etree(xml).xpath(
        _SIGNING_CERTS, namespaces=OneLogin_Saml2_Constants.NSMAP, entity=entity_id
    )
    return any("".join(OneLogin_Saml2_XML.element_text(node).split()) == cert for node in found)


class _HttpsRedirectsOnly(urllib.request.HTTPRedirectHandler):
    """Follows a redirect only to https (or loopback http, as the setting allows): the
    metadata names the certificate Steplab trusts, so it must not be read in clear."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        parts = urlsplit(newurl)
        if parts.scheme != "https" and parts.hostname not in LOOPBACK_HOSTS:
            raise urllib.error.URLError(f"redirected to {newurl!r}, which is not https")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _metadata_read(url: str) -> bytes:
    """The metadata's bytes, within METADATA_TIMEOUT_SECONDS in all (urllib's timeout is
    per read: a server that trickles bytes would hold a sign-in longer) and
    METADATA_MAX_BYTES."""
    deadline = monotonic() + METADATA_TIMEOUT_SECONDS
    opener = urllib.request.build_opener(_HttpsRedirectsOnly)
    chunks: list[bytes] = []
    size = 0
    with opener.open(url, timeout=METADATA_TIMEOUT_SECONDS) as response:
        while chunk := response.read(64 * 1024):
            size += len(chunk)
            if size > METADATA_MAX_BYTES:
                raise ValueError(f"the metadata is over {METADATA_MAX_BYTES} bytes")
            if monotonic() > deadline:
                raise TimeoutError(f"the metadata took over {METADATA_TIMEOUT_SECONDS} s")
            chunks.append(chunk)
    return b"".join(chunks)


def _metadata_fetch(provider: dict[str, Any]) -> dict[str, Any]:
    """python3-saml's "idp" from the metadata; one that names no SSO URL or no signing
    certificate is refused like a URL that does not answer."""
    xml = _metadata_read(provider["metadata_url"])
    parsed = OneLogin_Saml2_IdPMetadataParser.parse(xml, entity_id=provider["entity_id"] or None)
    idp: dict[str, Any] = parsed.get("idp") or {}
    multi = idp.get("x509certMulti", {}).get("signing")
    single = idp.get("x509cert")
    if not idp.get("entityId") or not idp.get("singleSignOnService", {}).get("url"):
        raise ValueError("the metadata names no IdP entity ID or HTTP-Redirect SSO URL")
    if not multi and not (single and _signing_listed(xml, idp["entityId"], single)):
        raise ValueError("the metadata names no signing certificate")
    return idp


def metadata_idp(provider: dict[str, Any]) -> dict[str, Any]:
    """The IdP's part from its metadata URL: the copy held while it is fresh, else
    fetched (see the module's docstring for a URL that fails)."""
    key = _metadata_cache_key(provider)
    held: dict[str, Any] | None = cache.get(key)
    now = time.time()
    if held is not None and now < held["refresh_at"]:
        return copy.deepcopy(held["idp"])
    try:
        held = {"idp": _metadata_fetch(provider), "refresh_at": now + METADATA_REFRESH_SECONDS}
    except Exception as exc:  # urllib's URLError and timeouts, lxml's, python3-saml's
        if held is None:
            logger.error("SAML %s: metadata_url failed: %r", provider["id"], exc)
            raise IdpMetadataUnavailable(f"{provider['metadata_url']}: {exc!r}") from exc
        logger.warning(
            "SAML %s: metadata_url failed, the copy held is used: %r", provider["id"], exc
        )
        held = {**held, "refresh_at": now + METADATA_RETRY_SECONDS}
    cache.set(key, held, timeout=None)
    return copy.deepcopy(held["idp"])


def idp_settings(provider: dict[str, Any]) -> dict[str, Any]:
    """python3-saml's "idp" for one of STEPLAB_SAML_PROVIDERS."""
    if provider["metadata_url"]:
        return metadata_idp(provider)
    certs: list[str] = provider["x509certs"]
    idp: dict[str, Any] = {
        "entityId": provider["entity_id"],
        "singleSignOnService": {"url": provider["sso_url"]},
        "x509cert": certs[0],
    }
    if len(certs) > 1:
        # python3-saml checks a signature against each of "signing" when it is set.
        idp["x509certMulti"] = {"signing": list(certs)}
    return idp


def saml_provider(provider_id: str) -> dict[str, Any] | None:
    """The configured SAML provider with this id, or None."""
    return next((p for p in settings.STEPLAB_SAML_PROVIDERS if p["id"] == provider_id), None)


def _sp_metadata_only(request: HttpRequest) -> bool:
    """allauth's metadata view: python3-saml writes the SP's metadata without the IdP's
    part (``sp_validation_only``), so it never waits on the IdP's metadata URL."""
    match = getattr(request, "resolver_match", None)
    return match is not None and match.url_name == "saml_metadata"


def build_saml_config(request: HttpRequest, provider_config: dict[str, Any], org: str) -> Any:
    """allauth's ``build_saml_config`` with the IdP's part from ``idp_settings``."""
    provider = saml_provider(org)
    if provider is None:
        return _allauth_build_saml_config(request, provider_config, org)
    if provider["metadata_url"] and _sp_metadata_only(request):
        idp: dict[str, Any] = {"entityId": provider["entity_id"] or provider["metadata_url"]}
    else:
        idp = idp_settings(provider)
    stand_in = {"entity_id": idp["entityId"], "sso_url": "", "x509cert": ""}
    config = _allauth_build_saml_config(request, {**provider_config, "idp": stand_in}, org)
    config["idp"] = idp
    return config


def install() -> None:
    """Put ``build_saml_config`` where allauth's views and ``build_auth`` look it up."""
    saml_utils.build_saml_config = build_saml_config
    saml_views.build_saml_config = build_saml_config
