"""A small SAML 2.0 identity provider on loopback, for the SAML single sign-on tests.

It speaks the Web Browser SSO profile the way a lab's Shibboleth, Keycloak or Entra ID
does, so django-allauth and python3-saml talk to it unmodified: its SSO URL takes the
AuthnRequest that Steplab's redirect carries (HTTP-Redirect binding: deflated, base64),
signs in whoever the test says is at the keyboard, and answers with the page that posts
a Response to the request's assertion consumer URL (HTTP-POST binding), with an
Assertion for that person (NameID, audience, recipient, InResponseTo, validity times,
attributes) signed with RSA-SHA256 by its own key through xmlsec, as an IdP signs it.
It serves its metadata at its entity ID (/metadata), can demand AuthnRequests signed
with the SP's key (the HTTP-Redirect binding's signature over the query string), and can
encrypt the assertion to the SP's certificate (xmlsec: AES-256-CBC, its key wrapped with
RSA-OAEP). Its certificates are made here with cryptography; only the standard library's
HTTP server besides."""

from __future__ import annotations

import base64
import datetime as dt
import html
import json
import re
import secrets
import time
import zlib
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote_plus, urlsplit
from xml.sax.saxutils import escape, quoteattr

import xmlsec
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID
from lxml import etree

from config import sso_saml
from tests.loopback_http import LoopbackHttp

SAMLP = "urn:oasis:names:tc:SAML:2.0:protocol"
SAML = "urn:oasis:names:tc:SAML:2.0:assertion"
MD = "urn:oasis:names:tc:SAML:2.0:metadata"
DS = "http://www.w3.org/2000/09/xmldsig#"
REDIRECT = "urn:oasis:names:tc:SAML:2.0:bindings:HTTP-Redirect"
RSA_SHA256 = "http://www.w3.org/2001/04/xmldsig-more#rsa-sha256"
UID = "urn:oid:0.9.2342.19200300.100.1.1"
MAIL = "urn:oid:0.9.2342.19200300.100.1.3"
_FORM = re.compile(r'<form method="post" action="([^"]+)">')
_INPUT = re.compile(r'<input type="hidden" name="(\w+)" value="([^"]*)">')


def key_and_certificate(common_name: str) -> tuple[bytes, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


def _instant(moment: dt.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _sign(root: Any, element: Any, key_pem: bytes, cert_pem: bytes) -> None:
    """An enveloped XML signature of ``element`` (by its ID), after its Issuer, with
    exclusive canonicalization, RSA-SHA256 and SHA-256, and the certificate in KeyInfo."""
    xmlsec.tree.add_ids(root, ["ID"])
    signature = xmlsec.template.create(
        element, xmlsec.constants.TransformExclC14N, xmlsec.constants.TransformRsaSha256
    )
    element.find(f"{{{SAML}}}Issuer").addnext(signature)
    ref = xmlsec.template.add_reference(
        signature, xmlsec.constants.TransformSha256, uri="#" + element.get("ID")
    )
    xmlsec.template.add_transform(ref, xmlsec.constants.TransformEnveloped)
    xmlsec.template.add_transform(ref, xmlsec.constants.TransformExclC14N)
    xmlsec.template.add_x509_data(xmlsec.template.ensure_key_info(signature))
    key = xmlsec.Key.from_memory(key_pem, xmlsec.constants.KeyDataFormatPem)
    key.load_cert_from_memory(cert_pem, xmlsec.constants.KeyDataFormatPem)
    context = xmlsec.SignatureContext()
    context.key = key
    context.sign(signature)


def _encrypt(root: Any, cert_pem: bytes) -> None:
    """The Assertion replaced by an EncryptedAssertion for the holder of ``cert_pem``'s
    key: AES-256-CBC with a fresh key, that key wrapped with RSA-OAEP."""
    assertion = root.find(f"{{{SAML}}}Assertion")
    wrapper = etree.Element(f"{{{SAML}}}EncryptedAssertion")
    assertion.addprevious(wrapper)
    wrapper.append(assertion)
    template = xmlsec.template.encrypted_data_create(
        root, xmlsec.constants.TransformAes256Cbc, type=xmlsec.constants.TypeEncElement, ns="xenc"
    )
    xmlsec.template.encrypted_data_ensure_cipher_value(template)
    key_info = xmlsec.template.encrypted_data_ensure_key_info(template, ns="dsig")
    wrapped = xmlsec.template.add_encrypted_key(key_info, xmlsec.constants.TransformRsaOaep)
    xmlsec.template.encrypted_data_ensure_cipher_value(wrapped)
    keys = xmlsec.KeysManager()
    keys.add_key(xmlsec.Key.from_memory(cert_pem, xmlsec.constants.KeyDataFormatCertPem))
    context = xmlsec.EncryptionContext(keys)
    context.key = xmlsec.Key.generate(
        xmlsec.constants.KeyDataAes, 256, xmlsec.constants.KeyDataTypeSession
    )
    context.encrypt_xml(template, assertion)


def redirect_signature_valid(raw_query: str, cert_pem: bytes) -> bool:
    """The HTTP-Redirect binding's signature: RSA-SHA256 over
    ``SAMLRequest=...&RelayState=...&SigAlg=...`` as they stand, URL-encoded, in the query."""
    pieces = dict(piece.split("=", 1) for piece in raw_query.split("&") if "=" in piece)
    if "Signature" not in pieces or unquote_plus(pieces.get("SigAlg", "")) != RSA_SHA256:
        return False
    signed = "&".join(
        f"{name}={pieces[name]}"
        for name in ("SAMLRequest", "RelayState", "SigAlg")
        if name in pieces
    )
    public_key = x509.load_pem_x509_certificate(cert_pem).public_key()
    assert isinstance(public_key, rsa.RSAPublicKey)
    try:
        public_key.verify(
            base64.b64decode(unquote_plus(pieces["Signature"])),
            signed.encode(),
            padding.PKCS1v15(),
            hashes.SHA256(),
        )
    except (InvalidSignature, ValueError):
        return False
    return True


class SamlIdp(LoopbackHttp):
    """Start with ``start()``, stop with ``stop()``. ``person`` is whoever signs in next:
    ``{"name_id": ..., "attributes": {name: [values]}}``. ``sign_assertion`` and
    ``sign_response`` say what it signs; ``signing_key`` replaces the key it signs with
    (a certificate Steplab does not hold). ``metadata_certs``: the signing certificates
    its metadata lists (``metadata_key_use``: the use they are listed for, "signing";
    ``metadata_up`` False: the URL answers 503; ``metadata_delay``: seconds before it
    answers; ``metadata_padding``: bytes of comment after it; ``metadata_moved_to``: the
    URL answers 302 there instead; ``/metadata-moved`` serves the metadata too;
    ``metadata_trickle``: seconds between each tenth of it; ``metadata_sibling_use``:
    when set, the metadata is a federation's file whose first entity, another IdP, lists
    the same certificates for that use).
    ``sp_cert_pem``: the SP's certificate, whose key must sign every
    AuthnRequest (else 403). ``encrypt_to``: the certificate the assertion is
    encrypted to."""

    def __init__(self, name: str = "idp") -> None:
        self.key_pem, self.cert_pem = key_and_certificate(f"{name}.saml.test")
        self.signing_key = self.key_pem
        self.sign_assertion = True
        self.sign_response = False
        self.metadata_certs = [self.cert_pem]
        self.metadata_key_use = "signing"
        self.metadata_up = True
        self.metadata_delay = 0.0
        self.metadata_fetches = 0
        self.metadata_padding = 0
        self.metadata_trickle = 0.0
        self.metadata_moved_to: str | None = None
        self.metadata_sibling_use: str | None = None
        self.sp_cert_pem: bytes | None = None
        self.encrypt_to: bytes | None = None
        self.person: dict[str, Any] = {}
        self.requests: list[dict[str, Any]] = []

    @property
    def entity_id(self) -> str:
        return f"{self.url}/metadata"

    def start(self) -> SamlIdp:
        idp = self

        class Handler(_Handler):
            owner = idp

        self.serve(Handler)
        return self

    def entry(self, provider_id: str, name: str, **extra: Any) -> dict[str, Any]:
        """This IdP as one object of STEPLAB_SAML_PROVIDERS (what its metadata says)."""
        return {
            "id": provider_id,
            "name": name,
            "entity_id": self.entity_id,
            "sso_url": f"{self.url}/sso",
            "x509cert": self.cert_pem.decode(),
            **extra,
        }

    def metadata(self) -> tuple[int, str]:
        """Its metadata, as the IdP's administrator publishes it: entity ID, the SSO URL
        (HTTP-Redirect) and a KeyDescriptor per signing certificate."""
        self.metadata_fetches += 1
        time.sleep(self.metadata_delay)
        if not self.metadata_up:
            return 503, "down"
        entity = self._entity(self.entity_id, self.metadata_key_use)
        if self.metadata_sibling_use is not None:
            sibling = self._entity("https://other.saml.test/idp", self.metadata_sibling_use)
            entity = f"<md:EntitiesDescriptor>{sibling}{entity}</md:EntitiesDescriptor>"
        root = entity.index(">")
        namespaced = f'{entity[:root]} xmlns:md="{MD}" xmlns:ds="{DS}"{entity[root:]}'
        return 200, namespaced + (
            f"<!--{'x' * self.metadata_padding}-->" if self.metadata_padding else ""
        )

    def _entity(self, entity_id: str, use: str) -> str:
        keys = "".join(
            f"<md:KeyDescriptor use={quoteattr(use)}><ds:KeyInfo>"
            "<ds:X509Data><ds:X509Certificate>"
            f"{''.join(cert.decode().splitlines()[1:-1])}"
            "</ds:X509Certificate></ds:X509Data></ds:KeyInfo></md:KeyDescriptor>"
            for cert in self.metadata_certs
        )
        return (
            f"<md:EntityDescriptor entityID={quoteattr(entity_id)}>"
            f'<md:IDPSSODescriptor protocolSupportEnumeration="{SAMLP}">{keys}'
            f'<md:SingleSignOnService Binding="{REDIRECT}" Location="{self.url}/sso"/>'
            "</md:IDPSSODescriptor></md:EntityDescriptor>"
        )

    def sso(self, query: dict[str, str], raw_query: str = "") -> tuple[int, str]:
        """The SSO URL: the AuthnRequest in, the page posting the Response out."""
        request = etree.fromstring(zlib.decompress(base64.b64decode(query["SAMLRequest"]), -15))
        issuer = request.find(f"{{{SAML}}}Issuer")
        seen = {
            "id": request.get("ID"),
            "acs": request.get("AssertionConsumerServiceURL"),
            "audience": issuer.text if issuer is not None else "",
            "signed": "Signature" in query,
        }
        self.requests.append(seen)
        if self.sp_cert_pem is not None and not redirect_signature_valid(
            raw_query, self.sp_cert_pem
        ):
            return 403, "The AuthnRequest is not signed by the service provider's key."
        xml = self.response(acs=seen["acs"], audience=seen["audience"], in_response_to=seen["id"])
        return 200, self.post_page(seen["acs"], xml, query.get("RelayState"))

    def response(self, *, acs: str, audience: str, in_response_to: str | None) -> bytes:
        """A signed Response for ``person``; no ``in_response_to``: unsolicited (an
        IdP-initiated sign-in)."""
        now = dt.datetime.now(dt.UTC)
        answers = f" InResponseTo={quoteattr(in_response_to)}" if in_response_to else ""
        attributes = "".join(
            f"<saml:Attribute Name={quoteattr(attr)} NameFormat="
            '"urn:oasis:names:tc:SAML:2.0:attrname-format:uri">'
            + "".join(
                f'<saml:AttributeValue xsi:type="xs:string">{escape(v)}</saml:AttributeValue>'
                for v in values
            )
            + "</saml:Attribute>"
            for attr, values in self.person.get("attributes", {}).items()
        )
        later = _instant(now + dt.timedelta(minutes=5))
        xml = (
            f'<samlp:Response xmlns:samlp="{SAMLP}" xmlns:saml="{SAML}"'
            f' ID="_r{secrets.token_hex(16)}" Version="2.0" IssueInstant="{_instant(now)}"'
            f" Destination={quoteattr(acs)}{answers}>"
            f"<saml:Issuer>{escape(self.entity_id)}</saml:Issuer>"
            '<samlp:Status><samlp:StatusCode Value="urn:oasis:names:tc:SAML:2.0:status:Success"/>'
            "</samlp:Status>"
            f'<saml:Assertion xmlns:xs="http://www.w3.org/2001/XMLSchema"'
            ' xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"'
            f' ID="_a{secrets.token_hex(16)}" Version="2.0" IssueInstant="{_instant(now)}">'
            f"<saml:Issuer>{escape(self.entity_id)}</saml:Issuer>"
            "<saml:Subject>"
            '<saml:NameID Format="urn:oasis:names:tc:SAML:2.0:nameid-format:persistent">'
            f"{escape(self.person['name_id'])}</saml:NameID>"
            '<saml:SubjectConfirmation Method="urn:oasis:names:tc:SAML:2.0:cm:bearer">'
            f'<saml:SubjectConfirmationData NotOnOrAfter="{later}" Recipient={quoteattr(acs)}'
            f"{answers}/></saml:SubjectConfirmation></saml:Subject>"
            f'<saml:Conditions NotBefore="{_instant(now - dt.timedelta(minutes=1))}"'
            f' NotOnOrAfter="{later}"><saml:AudienceRestriction>'
            f"<saml:Audience>{escape(audience)}</saml:Audience>"
            "</saml:AudienceRestriction></saml:Conditions>"
            f'<saml:AuthnStatement AuthnInstant="{_instant(now)}"'
            f' SessionIndex="_s{secrets.token_hex(8)}"><saml:AuthnContext>'
            "<saml:AuthnContextClassRef>"
            "urn:oasis:names:tc:SAML:2.0:ac:classes:PasswordProtectedTransport"
            "</saml:AuthnContextClassRef></saml:AuthnContext></saml:AuthnStatement>"
            f"<saml:AttributeStatement>{attributes}</saml:AttributeStatement>"
            "</saml:Assertion></samlp:Response>"
        )
        root = etree.fromstring(xml.encode())
        if self.sign_assertion:
            _sign(root, root.find(f"{{{SAML}}}Assertion"), self.signing_key, self.cert_pem)
        if self.encrypt_to is not None:
            _encrypt(root, self.encrypt_to)
        if self.sign_response:
            _sign(root, root, self.signing_key, self.cert_pem)
        return etree.tostring(root)

    @staticmethod
    def post_page(acs: str, xml: bytes, relay_state: str | None) -> str:
        """The HTTP-POST binding's page: a form with the Response, sent by script at
        once (a button where scripts are off), as IdPs do."""
        fields = {"SAMLResponse": base64.b64encode(xml).decode()}
        if relay_state is not None:
            fields["RelayState"] = relay_state
        inputs = "".join(
            f'<input type="hidden" name="{name}" value="{html.escape(value)}">'
            for name, value in fields.items()
        )
        return (
            "<!doctype html><html><head><title>Signing in</title></head><body>"
            f'<form method="post" action="{html.escape(acs)}">{inputs}'
            '<noscript><button type="submit">Continue</button></noscript></form>'
            "<script>document.forms[0].submit()</script></body></html>"
        )


def posted_form(page: str) -> tuple[str, dict[str, str]]:
    """What the IdP's page would post, and where (the test client's stand-in for the
    browser's script)."""
    action = _FORM.search(page)
    assert action is not None, page
    fields = {name: html.unescape(value) for name, value in _INPUT.findall(page)}
    return html.unescape(action.group(1)), fields


def saml_configure(settings: Any, entries: list[dict[str, Any]]) -> None:
    """Point Steplab's settings (pytest-django's ``settings``) at these IdPs, through the
    same parsing as STEPLAB_SAML_PROVIDERS (config/sso_saml.py)."""
    providers = sso_saml.saml_providers(json.dumps(entries))
    settings.STEPLAB_SAML_PROVIDERS = providers
    settings.SOCIALACCOUNT_PROVIDERS = {
        **settings.SOCIALACCOUNT_PROVIDERS,
        **sso_saml.allauth_saml(providers),
    }
    policy = json.loads(json.dumps(settings.CONTENT_SECURITY_POLICY))
    policy["DIRECTIVES"]["form-action"] = ["'self'", *sso_saml.saml_origins(providers)]
    settings.CONTENT_SECURITY_POLICY = policy


class _Handler(BaseHTTPRequestHandler):
    owner: SamlIdp

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        if parts.path == "/metadata" and self.owner.metadata_moved_to:
            self.owner.metadata_fetches += 1
            self._answer(302, "moved", location=self.owner.metadata_moved_to)
            return
        if parts.path in ("/metadata", "/metadata-moved"):
            self._answer(*self.owner.metadata(), trickle=self.owner.metadata_trickle)
            return
        if parts.path != "/sso":
            self._answer(404, "not found")
            return
        query = {k: v[0] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        self._answer(*self.owner.sso(query, parts.query))

    def _answer(
        self, status: int, body: str, location: str | None = None, trickle: float = 0.0
    ) -> None:
        data = body.encode()
        self.send_response(status)
        if location is not None:
            self.send_header("Location", location)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not trickle:
            self.wfile.write(data)
            return
        step = len(data) // 10 + 1
        for start in range(0, len(data), step):  # each piece before any read's timeout
            self.wfile.write(data[start : start + step])
            self.wfile.flush()
            time.sleep(trickle)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read ``requests`` instead."""
