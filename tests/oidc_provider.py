"""A small OpenID Connect identity provider on loopback, for the single sign-on tests.

It speaks the protocol over HTTP the way a lab's Keycloak or Entra ID does, so
django-allauth talks to it unmodified: discovery, an authorization endpoint that signs in
whoever the test says is at the keyboard and redirects back with a code, a token endpoint
that checks the client's secret, the redirect URI and the PKCE verifier and returns an
RS256-signed ID token, userinfo, and the JWKS the token is checked against. Only the
standard library's HTTP server, PyJWT and cryptography (allauth's own dependencies)."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from config import sso
from tests.loopback_http import LoopbackHttp, sign_in_button_pressed

CLIENT_ID = "steplab-test"
CLIENT_SECRET = "s3cret-" + secrets.token_hex(8)
KEY_ID = "test-key-1"


class OidcProvider(LoopbackHttp):
    """Start with ``start()``, stop with ``stop()``; ``person`` is the set of claims of
    whoever signs in next (``sub`` and ``preferred_username`` at least)."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        # The secret the token endpoint accepts; a test rotates it to break the client.
        self.client_secret = CLIENT_SECRET
        self.person: dict[str, Any] = {}
        self.codes: dict[str, dict[str, Any]] = {}
        self.tokens: dict[str, dict[str, Any]] = {}
        self.token_requests: list[dict[str, str]] = []
        self.refused: list[str] = []

    def start(self) -> OidcProvider:
        provider = self

        class Handler(_Handler):
            idp = provider

        self.serve(Handler)
        return self

    def configure(
        self,
        settings: Any,
        *,
        name: str = "Lab SSO",
        provider_id: str = "lab",
        role_map: dict[str, Any] | None = None,
    ) -> None:
        """Point Steplab's settings (pytest-django's ``settings``) at this provider alone,
        with ``role_map`` as its own (STEPLAB_OIDC_PROVIDERS' ``role_map``)."""
        providers_configured(
            settings, [self.entry(name=name, provider_id=provider_id, role_map=role_map)]
        )

    def entry(
        self, *, name: str, provider_id: str, role_map: dict[str, Any] | None = None, **more: Any
    ) -> dict[str, Any]:
        """This provider's object in STEPLAB_OIDC_PROVIDERS (``more``: e.g. role_claim)."""
        return {
            "id": provider_id,
            "name": name,
            "server_url": self.url,
            "client_id": CLIENT_ID,
            "secret": CLIENT_SECRET,
            "role_map": role_map or {},
            **more,
        }

    def sign_in(self, client: Any, person: dict[str, Any], provider_id: str = "lab") -> Any:
        """The browser's round trip with Django's test ``client``: the button's POST, this
        provider's authorization page (which signs ``person`` in), and back to Steplab's
        callback, whose response is returned."""
        self.person = person
        at_provider = sign_in_button_pressed(
            client, f"/accounts/oidc/{provider_id}/login/", f"{self.url}/authorize?"
        )
        assert at_provider.status_code == 302, at_provider.text
        back = urlsplit(at_provider.headers["Location"])
        return client.get(f"{back.path}?{back.query}")

    def discovery(self) -> dict[str, Any]:
        return {
            "issuer": self.url,
            "authorization_endpoint": f"{self.url}/authorize",
            "token_endpoint": f"{self.url}/token",
            "userinfo_endpoint": f"{self.url}/userinfo",
            "jwks_uri": f"{self.url}/jwks",
            "response_types_supported": ["code"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["RS256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "client_secret_post"],
            "code_challenge_methods_supported": ["S256"],
            "scopes_supported": ["openid", "profile", "email"],
        }

    def jwks(self) -> dict[str, Any]:
        key = RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        key.update({"kid": KEY_ID, "use": "sig", "alg": "RS256"})
        return {"keys": [key]}

    def authorize(self, query: dict[str, str]) -> tuple[int, dict[str, str], str]:
        """The person in ``self.person`` is signed in at once (no login page here)."""
        if query.get("client_id") != CLIENT_ID or query.get("response_type") != "code":
            return self._refuse("authorize: unknown client or response type")
        if "openid" not in query.get("scope", "").split():
            return self._refuse("authorize: no openid scope")
        code = secrets.token_urlsafe(16)
        self.codes[code] = {
            "person": dict(self.person),
            "redirect_uri": query["redirect_uri"],
            "nonce": query.get("nonce"),
            "challenge": query.get("code_challenge"),
        }
        back = {"code": code, "state": query.get("state", "")}
        return 302, {"Location": f"{query['redirect_uri']}?{urlencode(back)}"}, ""

    def token(self, form: dict[str, str], authorization: str) -> tuple[int, dict[str, str], str]:
        self.token_requests.append(dict(form))
        client_id, secret = form.get("client_id"), form.get("client_secret")
        if authorization.startswith("Basic "):
            decoded = base64.b64decode(authorization[6:]).decode()
            client_id, _, secret = decoded.partition(":")
        if client_id != CLIENT_ID or secret != self.client_secret:
            return self._refuse("token: wrong client credentials", status=401)
        grant = self.codes.pop(form.get("code", ""), None)
        if grant is None or form.get("redirect_uri") != grant["redirect_uri"]:
            return self._refuse("token: unknown code or redirect_uri")
        if grant["challenge"] and _s256(form.get("code_verifier", "")) != grant["challenge"]:
            return self._refuse("token: PKCE verifier does not match")
        access = secrets.token_urlsafe(24)
        self.tokens[access] = grant["person"]
        now = int(time.time())
        claims = {
            **grant["person"],
            "iss": self.url,
            "aud": CLIENT_ID,
            "iat": now,
            "exp": now + 300,
        }
        if grant["nonce"]:
            claims["nonce"] = grant["nonce"]
        id_token = jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": KEY_ID})
        body = {"access_token": access, "token_type": "Bearer", "expires_in": 300}
        return 200, {}, json.dumps({**body, "id_token": id_token})

    def userinfo(self, authorization: str) -> tuple[int, dict[str, str], str]:
        person = self.tokens.get(authorization.removeprefix("Bearer ").strip())
        if person is None:
            return self._refuse("userinfo: unknown access token", status=401)
        return 200, {}, json.dumps(person)

    def _refuse(self, why: str, status: int = 400) -> tuple[int, dict[str, str], str]:
        self.refused.append(why)
        return status, {}, json.dumps({"error": "invalid_request", "error_description": why})


def providers_configured(settings: Any, entries: list[dict[str, Any]]) -> None:
    """Steplab's settings with these STEPLAB_OIDC_PROVIDERS entries (``entry()``),
    through the same parsing as the environment's (config/sso.py)."""
    providers = sso.oidc_providers(json.dumps(entries))
    settings.STEPLAB_OIDC_PROVIDERS = providers
    settings.SOCIALACCOUNT_PROVIDERS = sso.allauth_providers(providers)
    policy = json.loads(json.dumps(settings.CONTENT_SECURITY_POLICY))
    policy["DIRECTIVES"]["form-action"] = ["'self'", *sso.provider_origins(providers)]
    settings.CONTENT_SECURITY_POLICY = policy


def _s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class _Handler(BaseHTTPRequestHandler):
    idp: OidcProvider

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        routes = {
            "/.well-known/openid-configuration": lambda: (
                200,
                {},
                json.dumps(self.idp.discovery()),
            ),
            "/jwks": lambda: (200, {}, json.dumps(self.idp.jwks())),
            "/authorize": lambda: self.idp.authorize(query),
            "/userinfo": lambda: self.idp.userinfo(self.headers.get("Authorization", "")),
        }
        route = routes.get(parts.path)
        self._answer(*(route() if route else (404, {}, "{}")))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
        if urlsplit(self.path).path == "/token":
            self._answer(*self.idp.token(form, self.headers.get("Authorization", "")))
        elif urlsplit(self.path).path == "/userinfo":
            self._answer(*self.idp.userinfo(self.headers.get("Authorization", "")))
        else:
            self._answer(404, {}, "{}")

    def _answer(self, status: int, headers: dict[str, str], body: str) -> None:
        data = body.encode()
        self.send_response(status)
        headers = {"Content-Type": "application/json", **headers}
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read ``refused`` and ``token_requests`` instead."""
