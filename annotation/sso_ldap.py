"""LDAP sign-in through django-auth-ldap, as Steplab wants it (settings, "LDAP"; README):
the login form's username and password are checked by binding to the directory; an
account is made at a person's first sign-in, names and e-mail follow the directory, and
their LDAP groups set project roles at every sign-in (STEPLAB_LDAP_ROLE_MAP, the same
rules as OIDC's: annotation/projects/sso_roles.py).

The backend stands in AUTHENTICATION_BACKENDS always, so a session it made keeps working,
but it signs no one in while STEPLAB_LDAP_URI is unset. A wrong password is a plain
refusal (None), which Django reports to django-axes like any other: the lockout counts
directory attempts too. A directory that is down or refuses the connection is a refusal
as well, logged by django-auth-ldap ("Caught LDAPError ...")."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.http import HttpRequest
from django_auth_ldap.backend import LDAPBackend

from annotation.projects.sso_roles import group_roles_apply


def ldap_sign_in_name() -> str:
    """What the login page calls the directory ("" while LDAP is off)."""
    return settings.STEPLAB_LDAP_NAME if settings.STEPLAB_LDAP_URI else ""


def password_form_shown() -> bool:
    """The login form is there for local passwords or for directory accounts."""
    return bool(settings.STEPLAB_LOCAL_PASSWORDS or settings.STEPLAB_LDAP_URI)


class LdapBackend(LDAPBackend):
    def authenticate(
        self,
        request: HttpRequest | None,
        username: str | None = None,
        password: str | None = None,
        **kwargs: Any,
    ) -> Any:
        if not settings.STEPLAB_LDAP_URI:
            return None
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None:
            self._roles_apply(user)
        return user

    def get_or_build_user(self, username: str, ldap_user: Any) -> tuple[User, bool]:
        """An account made here with a password (a local account), or by an OIDC
        provider's sign-in, is never signed into through the directory, even by a
        directory entry with the same username: that would hand a local account, perhaps
        a superuser's, to whoever holds the name in the directory. The attempt falls
        through to the local password check."""
        user, built = super().get_or_build_user(username, ldap_user)
        if not built and (user.has_usable_password() or user.socialaccount_set.exists()):
            raise ldap_user.AuthenticationFailed(
                f"{username!r} is a local account; the directory does not sign into it."
            )
        return user, built

    def _roles_apply(self, user: Any) -> None:
        if not settings.STEPLAB_LDAP_ROLE_MAP or self.settings.GROUP_SEARCH is None:
            return
        ldap_user = user.ldap_user
        groups = [name.lower() for name in ldap_user.group_names]
        groups += [dn.lower() for dn in ldap_user.group_dns]
        group_roles_apply(
            user=user, groups=groups, role_map=settings.STEPLAB_LDAP_ROLE_MAP, source="LDAP"
        )
