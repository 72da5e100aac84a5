"""Single sign-on through django-allauth's OpenID Connect provider (and its SAML provider:
annotation/sso_saml.py), as Steplab wants it
(settings, "Single sign-on"): the providers come from the environment, an account is made
at a person's first sign-in, the provider's group claim sets project roles at every
sign-in, and password sign-in can be switched off for everyone but superusers."""

from __future__ import annotations

import logging
from typing import Any

from allauth.account.adapter import DefaultAccountAdapter
from allauth.account.signals import user_logged_in
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialLogin
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.http import HttpRequest
from django.urls import reverse

from annotation.projects.sso_roles import claim_groups, group_roles_apply
from annotation.sso_saml import saml_roles_apply

logger = logging.getLogger(__name__)

# The backend a provider's sign-in is recorded with: the one that restores the session's
# user on every request (LocalPasswordGate authenticates nobody).
_SESSION_BACKEND = "django.contrib.auth.backends.ModelBackend"


def sso_providers() -> list[dict[str, str]]:
    """The configured providers, OIDC's then SAML's, as the login page lists them: the
    name on the button and the URL it posts to."""
    oidc = [
        {"name": p["name"], "url": reverse("openid_connect_login", args=[p["id"]])}
        for p in settings.STEPLAB_OIDC_PROVIDERS
    ]
    saml = [
        {"name": p["name"], "url": reverse("saml_login", args=[p["id"]])}
        for p in settings.STEPLAB_SAML_PROVIDERS
    ]
    return oidc + saml


class LocalPasswordGate:
    """With STEPLAB_LOCAL_PASSWORDS off, a password sign-in by anyone but a superuser is
    refused (PermissionDenied stops Django's ``authenticate`` before ModelBackend, and
    is counted as a failure by django-axes like a wrong password). Superusers keep their
    password as the break-glass door for when the identity provider is down. No
    ``get_user``: this backend never restores a session."""

    def authenticate(
        self, request: HttpRequest | None, username: str | None = None, **kwargs: Any
    ) -> None:
        if settings.STEPLAB_LOCAL_PASSWORDS or username is None or "password" not in kwargs:
            return None
        user_model = get_user_model()
        superuser = user_model._default_manager.filter(
            **{user_model.USERNAME_FIELD: username, "is_superuser": True}
        ).exists()
        if not superuser:
            raise PermissionDenied("Password sign-in is off; use single sign-on.")
        return None


class AccountAdapter(DefaultAccountAdapter):
    """allauth's account side, used only by its social flow: no local sign-up (allauth's
    account pages are not served), and the session restored by Django's ModelBackend."""

    def is_open_for_signup(self, request: HttpRequest) -> bool:
        return False

    def login(self, request: HttpRequest, user: Any) -> None:
        user.backend = _SESSION_BACKEND
        super().login(request, user)

    def is_safe_url(self, url: str | None) -> bool:
        """allauth's rule, and at most STEPLAB_NEXT_URL_MAX_CHARS long: a next URL is kept
        in the session (allauth's state) across the sign-in, before anyone is signed in,
        so a longer one is dropped (the sign-in lands at home) rather than stored."""
        if url and len(url) > settings.STEPLAB_NEXT_URL_MAX_CHARS:
            return False
        return bool(super().is_safe_url(url))


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    """Accounts are made at a configured provider's first sign-in (a provider id that is
    not configured is a 404: allauth's OIDC views say so themselves)."""

    def is_open_for_signup(self, request: HttpRequest, sociallogin: SocialLogin) -> bool:
        return True

    def on_authentication_error(
        self,
        request: HttpRequest,
        provider: Any,
        error: Any = None,
        exception: Any = None,
        extra_context: Any = None,
    ) -> None:
        """The person sees only that it failed (templates/socialaccount/); the log says why
        (for SAML, python3-saml's reason, in ``extra_context``)."""
        name = getattr(provider, "sub_id", None) or getattr(provider, "id", provider)
        reason = (extra_context or {}).get("saml_last_error_reason") or exception
        logger.warning("Sign-in through %s failed: %s %r", name, error, reason)

    def populate_user(self, request: HttpRequest, sociallogin: SocialLogin, data: Any) -> Any:
        """The username is preferred_username, else the e-mail address (allauth takes
        only its part before the @ otherwise); a taken one is made unique by allauth."""
        user = super().populate_user(request, sociallogin, data)
        if not user.username and data.get("email"):
            user.username = str(data["email"])[:150]
        return user


def provider_claims(sociallogin: SocialLogin) -> dict[str, Any]:
    """The ID token's claims with the userinfo's over them (allauth keeps both)."""
    extra = sociallogin.account.extra_data or {}
    claims: dict[str, Any] = {}
    for part in ("id_token", "userinfo"):
        if isinstance(extra.get(part), dict):
            claims.update(extra[part])
    return claims or dict(extra)


def oidc_roles_apply(*, user: Any, sociallogin: SocialLogin) -> dict[str, str]:
    """Set ``user``'s roles from the values of the claim ``role_claim`` of the OIDC
    provider this sign-in came through, by that provider's own ``role_map`` only
    (config/sso.py): another provider's groups grant nothing here."""
    provider_id = sociallogin.account.provider
    provider = next((p for p in settings.STEPLAB_OIDC_PROVIDERS if p["id"] == provider_id), None)
    if provider is None:
        logger.warning("Sign-in through %r, no configured provider: no roles.", provider_id)
        return {}
    return group_roles_apply(
        user=user,
        groups=claim_groups(provider_claims(sociallogin), provider["role_claim"]),
        role_map=provider["role_map"],
        source=f"OIDC {provider['id']}",
    )


@receiver(user_logged_in)
def _roles_on_sign_in(
    sender: Any, request: HttpRequest, user: Any, sociallogin: SocialLogin | None = None, **_: Any
) -> None:
    """At every sign-in through a provider (the first included), the group claim's
    mapped roles are applied (annotation/projects/sso_roles.py), each provider's by its
    own map: a SAML provider's (annotation/sso_saml.py), an OIDC provider's (above)."""
    if sociallogin is None:
        return
    if saml_roles_apply(user=user, sociallogin=sociallogin):
        return
    oidc_roles_apply(user=user, sociallogin=sociallogin)
