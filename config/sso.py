"""Single sign-on read from the environment (settings, "Single sign-on" and "LDAP"; README).

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


def oidc_providers(
    raw: str, *, role_claim: str = "", legacy_role_map: str = ""
) -> list[dict[str, Any]]:
    """STEPLAB_OIDC_PROVIDERS: a JSON list of ``{"id", "name", "server_url",
    "client_id", "secret"}`` objects (``id`` defaults to "oidc", ``secret`` to "" for a
    public client), each with an optional ``role_claim`` (default ``role_claim``, from
    STEPLAB_OIDC_ROLE_CLAIM, else "groups") and ``role_map`` (see ``role_map``). Each
    provider's map is its own, as a SAML organization's (config/sso_saml.py): a
    provider's ID token grants roles only through the groups its own entry maps.
    ``legacy_role_map`` is STEPLAB_OIDC_ROLE_MAP, the one map of before: it is the
    ``role_map`` of a single provider that has none; with several providers, or beside a
    provider's own ``role_map``, it is ambiguous and stops start-up. Empty or unset: no
    provider, and nothing of SSO shows anywhere."""
    legacy = role_map(legacy_role_map)
    if not raw.strip():
        return []
    items = _json("STEPLAB_OIDC_PROVIDERS", raw)
    if isinstance(items, dict):
        items = [items]
    if not isinstance(items, list):
        raise ImproperlyConfigured("STEPLAB_OIDC_PROVIDERS must be a JSON list of objects.")
    providers: list[dict[str, Any]] = []
    for item in items:
        provider = _oidc_provider(item, role_claim or "groups")
        if provider["id"] in {p["id"] for p in providers}:
            raise ImproperlyConfigured(f"STEPLAB_OIDC_PROVIDERS: id {provider['id']!r} twice.")
        providers.append(provider)
    if legacy:
        _legacy_role_map_placed(providers, items, legacy)
    return providers


def _oidc_provider(item: Any, role_claim: str) -> dict[str, Any]:
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
    where = f"STEPLAB_OIDC_PROVIDERS[{provider_id}]"
    return {
        "id": provider_id,
        "name": str(item["name"]),
        "server_url": str(item["server_url"]).rstrip("/"),
        "client_id": str(item["client_id"]),
        "secret": str(item.get("secret") or ""),
        "role_claim": str(item.get("role_claim") or role_claim),
        "role_map": role_map(json.dumps(item.get("role_map") or {}), f"{where}.role_map"),
    }


def _legacy_role_map_placed(
    providers: list[dict[str, Any]], items: list[Any], legacy: dict[str, list[tuple[str, str]]]
) -> None:
    """STEPLAB_OIDC_ROLE_MAP becomes the single provider's map. With several providers
    it would let any of them claim every mapped group, so it stops start-up instead."""
    if len(providers) != 1:
        raise ImproperlyConfigured(
            "STEPLAB_OIDC_ROLE_MAP is set with several STEPLAB_OIDC_PROVIDERS: whose groups "
            'would it map? Move it into each provider\'s own "role_map" and unset it.'
        )
    if items[0].get("role_map"):
        raise ImproperlyConfigured(
            f"STEPLAB_OIDC_ROLE_MAP and STEPLAB_OIDC_PROVIDERS[{providers[0]['id']}].role_map "
            'are both set: keep the provider\'s "role_map" and unset STEPLAB_OIDC_ROLE_MAP.'
        )
    providers[0]["role_map"] = legacy


def allauth_providers(providers: list[dict[str, Any]]) -> dict[str, Any]:
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


def provider_origins(providers: list[dict[str, Any]]) -> list[str]:
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


def role_map(raw: str, name: str = "STEPLAB_OIDC_ROLE_MAP") -> dict[str, list[tuple[str, str]]]:
    """An OIDC provider's ``role_map`` (STEPLAB_OIDC_ROLE_MAP of before, a SAML
    provider's, STEPLAB_LDAP_ROLE_MAP: ``name``, which an error names): JSON object from a
    claim value (a group) to one grant ``{"project": NAME, "role": ROLE}`` or a list of
    them. Returns group -> [(project, role)]. A role outside ``ROLES`` stops start-up: a
    typo must not grant nothing silently."""
    if not raw.strip():
        return {}
    data = _json(name, raw)
    if not isinstance(data, dict):
        raise ImproperlyConfigured(f"{name} must be a JSON object.")
    mapped: dict[str, list[tuple[str, str]]] = {}
    for group, grants in data.items():
        grants = grants if isinstance(grants, list) else [grants]
        for grant in grants:
            if not isinstance(grant, dict) or not grant.get("project"):
                raise ImproperlyConfigured(
                    f'{name}[{group!r}]: each grant is {{"project": "<name>", "role": "<role>"}}.'
                )
            role = grant.get("role", "annotator")
            if role not in ROLES:
                raise ImproperlyConfigured(
                    f"{name}[{group!r}]: role {role!r} is not one of {ROLES}."
                )
            mapped.setdefault(str(group), []).append((str(grant["project"]), role))
    return mapped


# LDAP (annotation/sso_ldap.py): STEPLAB_LDAP_GROUP_TYPE -> django-auth-ldap's group type
# and the filter that finds such groups.
_LDAP_GROUP_TYPES = {
    "groupOfNames": ("GroupOfNamesType", "(objectClass=groupOfNames)"),
    "groupOfUniqueNames": ("GroupOfUniqueNamesType", "(objectClass=groupOfUniqueNames)"),
    "posixGroup": ("PosixGroupType", "(objectClass=posixGroup)"),
}
_LDAP_ATTRS = {"first_name": "givenName", "last_name": "sn", "email": "mail"}
_TRUE = {"1", "true", "yes", "on"}


def _ldap_scope(name: str, base: str, filterstr: str) -> Any:
    from django_auth_ldap.config import LDAPSearch
    from ldap import SCOPE_SUBTREE, dn

    if not dn.is_dn(base):
        raise ImproperlyConfigured(f"{name}: {base!r} is not a DN (e.g. ou=people,dc=lab,dc=org).")
    return LDAPSearch(base, SCOPE_SUBTREE, filterstr)


def _env_reader(env: Any) -> Any:
    def get(name: str, default: str = "") -> str:
        return str(env.get(name) or default).strip()

    return get


def _ldap_user_lookup(get: Any) -> dict[str, Any]:
    """How a person is found: a DN template to bind as, or a search under a base DN."""
    template = get("STEPLAB_LDAP_USER_DN_TEMPLATE")
    search_base = get("STEPLAB_LDAP_USER_SEARCH")
    user_filter = get("STEPLAB_LDAP_USER_FILTER", "(uid=%(user)s)")
    if bool(template) == bool(search_base):
        raise ImproperlyConfigured(
            "STEPLAB_LDAP_URI is set: set one of STEPLAB_LDAP_USER_DN_TEMPLATE (bind as "
            "uid=%(user)s,ou=people,...) or STEPLAB_LDAP_USER_SEARCH (a base DN to search)."
        )
    for name, value in (
        ("STEPLAB_LDAP_USER_DN_TEMPLATE", template),
        ("STEPLAB_LDAP_USER_FILTER", user_filter),
    ):
        if value and "%(user)s" not in value:
            raise ImproperlyConfigured(f"{name} must contain %(user)s (the username).")
    return {
        "AUTH_LDAP_USER_DN_TEMPLATE": template or None,
        "AUTH_LDAP_USER_SEARCH": (
            _ldap_scope("STEPLAB_LDAP_USER_SEARCH", search_base, user_filter)
            if search_base
            else None
        ),
    }


def _ldap_groups(get: Any) -> dict[str, Any]:
    """Where the groups are, of which type, and the role map (keys in lower case: a
    group's cn or its DN, which LDAP compares without case, and so does Steplab)."""
    from django_auth_ldap import config as ldap_config

    group_base = get("STEPLAB_LDAP_GROUP_SEARCH")
    group_type = get("STEPLAB_LDAP_GROUP_TYPE", "groupOfNames")
    if group_type not in _LDAP_GROUP_TYPES:
        raise ImproperlyConfigured(
            f"STEPLAB_LDAP_GROUP_TYPE: {group_type!r} is not one of {list(_LDAP_GROUP_TYPES)}."
        )
    mapped: dict[str, list[tuple[str, str]]] = {}
    for group, grants in role_map(get("STEPLAB_LDAP_ROLE_MAP"), "STEPLAB_LDAP_ROLE_MAP").items():
        mapped.setdefault(group.lower(), []).extend(grants)
    if mapped and not group_base:
        raise ImproperlyConfigured(
            "STEPLAB_LDAP_ROLE_MAP needs STEPLAB_LDAP_GROUP_SEARCH (where the groups are)."
        )
    type_class, group_filter = _LDAP_GROUP_TYPES[group_type]
    return {
        "STEPLAB_LDAP_ROLE_MAP": mapped,
        "AUTH_LDAP_GROUP_SEARCH": (
            _ldap_scope("STEPLAB_LDAP_GROUP_SEARCH", group_base, group_filter)
            if group_base
            else None
        ),
        "AUTH_LDAP_GROUP_TYPE": getattr(ldap_config, type_class)(),
    }


def _ldap_connection(get: Any) -> dict[str, Any]:
    """Timeouts, STARTTLS and the CA the directory's certificate is checked against."""
    import ldap

    # A directory that does not answer holds a sign-in for seconds, not minutes.
    options: dict[int, Any] = {ldap.OPT_NETWORK_TIMEOUT: 5, ldap.OPT_TIMEOUT: 10}
    ca_file = get("STEPLAB_LDAP_CA_FILE")
    if ca_file:
        options[ldap.OPT_X_TLS_CACERTFILE] = ca_file
        options[ldap.OPT_X_TLS_REQUIRE_CERT] = ldap.OPT_X_TLS_DEMAND
        # Last: a new TLS context with the options above (python-ldap's rule).
        options[ldap.OPT_X_TLS_NEWCTX] = 0
    return {
        "AUTH_LDAP_START_TLS": get("STEPLAB_LDAP_START_TLS").lower() in _TRUE,
        "AUTH_LDAP_CONNECTION_OPTIONS": options,
    }


def ldap_settings(env: Any) -> dict[str, Any]:
    """STEPLAB_LDAP_* (README, "LDAP") as settings: Steplab's own (STEPLAB_LDAP_URI,
    STEPLAB_LDAP_NAME, STEPLAB_LDAP_ROLE_MAP) and django-auth-ldap's AUTH_LDAP_*. No
    STEPLAB_LDAP_URI: LDAP is off, and the backend signs no one in. ``env`` is a mapping
    (os.environ); a mistake stops start-up with the variable named."""
    get = _env_reader(env)
    uri = get("STEPLAB_LDAP_URI")
    if not uri:
        return {
            "STEPLAB_LDAP_URI": "",
            "STEPLAB_LDAP_NAME": "",
            "STEPLAB_LDAP_ROLE_MAP": {},
            "AUTH_LDAP_SERVER_URI": "",
        }
    for one in uri.split():
        if not one.lower().startswith(("ldap://", "ldaps://")):
            raise ImproperlyConfigured(
                f"STEPLAB_LDAP_URI: {one!r} must start with ldap:// or ldaps://."
            )
    attrs = dict(_LDAP_ATTRS)
    if get("STEPLAB_LDAP_ATTR_MAP"):
        extra = _json("STEPLAB_LDAP_ATTR_MAP", get("STEPLAB_LDAP_ATTR_MAP"))
        if not isinstance(extra, dict) or set(extra) - set(_LDAP_ATTRS):
            raise ImproperlyConfigured(
                f"STEPLAB_LDAP_ATTR_MAP: a JSON object with keys among {list(_LDAP_ATTRS)}."
            )
        attrs.update({str(k): str(v) for k, v in extra.items()})
    bind_dn = get("STEPLAB_LDAP_BIND_DN")
    return {
        "STEPLAB_LDAP_URI": uri,
        "STEPLAB_LDAP_NAME": get("STEPLAB_LDAP_NAME", "directory"),
        "AUTH_LDAP_SERVER_URI": uri,
        "AUTH_LDAP_BIND_DN": bind_dn,
        "AUTH_LDAP_BIND_PASSWORD": str(env.get("STEPLAB_LDAP_BIND_PASSWORD") or ""),
        # Without a bind account, the person's own bind reads their entry and groups
        # (directories rarely let anonymous clients read them).
        "AUTH_LDAP_BIND_AS_AUTHENTICATING_USER": not bind_dn,
        **_ldap_user_lookup(get),
        **_ldap_groups(get),
        **_ldap_connection(get),
        "AUTH_LDAP_USER_ATTR_MAP": attrs,
        # Names and e-mail follow the directory at every sign-in.
        "AUTH_LDAP_ALWAYS_UPDATE_USER": True,
        # Group memberships are read fresh at every sign-in (no cache to go stale).
        "AUTH_LDAP_CACHE_TIMEOUT": 0,
    }
