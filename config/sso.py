"""Single sign-on read from the environment (settings, "Single sign-on"; README).

Plain Python, no Django app code: the settings module calls these while it is being
imported, and a mistake in the JSON stops the process at start-up with the variable
named, rather than at the first person's sign-in."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

# annotation.models.Role's values; repeated here because settings import no app code.
ROLES = ("annotator", "lead", "ml")
# An id becomes part of the sign-in URL (/accounts/oidc/<id>/login/).
_PROVIDER_ID = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")


def _json(name: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ImproperlyConfigured(f"{name} is not valid JSON: {exc}") from exc


def oidc_providers(raw: str) -> list[dict[str, str]]:
    """STEPLAB_OIDC_PROVIDERS: a JSON list of ``{"id", "name", "server_url",
    "client_id", "secret"}`` objects (``id`` defaults to "oidc", ``secret`` to "" for a
    public client). Empty or unset: no provider, and nothing of SSO shows anywhere."""
    if not raw.strip():
        return []
    items = _json("STEPLAB_OIDC_PROVIDERS", raw)
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        raise ImproperlyConfigured("STEPLAB_OIDC_PROVIDERS must be a JSON list of objects.")
    providers: list[dict[str, str]] = []
    for item in items:
        if not isinstance(item, dict):
            raise ImproperlyConfigured("STEPLAB_OIDC_PROVIDERS must be a JSON list of objects.")
        missing = [key for key in ("name", "server_url", "client_id") if not item.get(key)]
        if missing:
            raise ImproperlyConfigured(f"STEPLAB_OIDC_PROVIDERS: a provider lacks {missing}.")
        provider_id = str(item.get("id") or "oidc")
        if not _PROVIDER_ID.match(provider_id):
            raise ImproperlyConfigured(
                f"STEPLAB_OIDC_PROVIDERS: id {provider_id!r} must be lower-case letters, "
                "digits, '-' or '_' (it is part of a URL)."
            )
        if provider_id in {p["id"] for p in providers}:
            raise ImproperlyConfigured(f"STEPLAB_OIDC_PROVIDERS: id {provider_id!r} twice.")
        providers.append(
            {
                "id": provider_id,
                "name": str(item["name"]),
                "server_url": str(item["server_url"]).rstrip("/"),
                "client_id": str(item["client_id"]),
                "secret": str(item.get("secret") or ""),
            }
        )
    return providers


def allauth_providers(providers: list[dict[str, str]]) -> dict[str, Any]:
    """SOCIALACCOUNT_PROVIDERS for django-allauth: every OIDC provider as an app of its
    ``openid_connect`` provider, configured in settings (no SocialApp rows to keep)."""
    if not providers:
        return {}
    apps = [
        {
            "provider_id": p["id"],
            "name": p["name"],
            "client_id": p["client_id"],
            "secret": p["secret"],
            "settings": {"server_url": p["server_url"]},
        }
        for p in providers
    ]
    # PKCE as well as the client secret: a stolen code is worthless without the verifier.
    return {"openid_connect": {"APPS": apps, "OAUTH_PKCE_ENABLED": True}}


def provider_origins(providers: list[dict[str, str]]) -> list[str]:
    """The identity providers' origins. The "Sign in with" button posts to Steplab, which
    redirects to the provider's authorization page; browsers hold that redirect to the
    Content-Security-Policy's form-action, so each origin is allowed there."""
    origins = []
    for p in providers:
        parts = urlsplit(p["server_url"])
        origin = f"{parts.scheme}://{parts.netloc}"
        if origin not in origins:
            origins.append(origin)
    return origins


def role_map(raw: str) -> dict[str, list[tuple[str, str]]]:
    """STEPLAB_OIDC_ROLE_MAP: JSON object from a claim value (a group) to one grant
    ``{"project": NAME, "role": ROLE}`` or a list of them. Returns group -> [(project,
    role)]. A role outside ``ROLES`` stops start-up: a typo must not grant nothing
    silently."""
    if not raw.strip():
        return {}
    data = _json("STEPLAB_OIDC_ROLE_MAP", raw)
    if not isinstance(data, dict):
        raise ImproperlyConfigured("STEPLAB_OIDC_ROLE_MAP must be a JSON object.")
    mapped: dict[str, list[tuple[str, str]]] = {}
    for group, grants in data.items():
        grants = grants if isinstance(grants, list) else [grants]
        for grant in grants:
            if not isinstance(grant, dict) or not grant.get("project"):
                raise ImproperlyConfigured(
                    f"STEPLAB_OIDC_ROLE_MAP[{group!r}]: each grant is "
                    '{"project": "<name>", "role": "<role>"}.'
                )
            role = grant.get("role", "annotator")
            if role not in ROLES:
                raise ImproperlyConfigured(
                    f"STEPLAB_OIDC_ROLE_MAP[{group!r}]: role {role!r} is not one of {ROLES}."
                )
            mapped.setdefault(str(group), []).append((str(grant["project"]), role))
    return mapped
