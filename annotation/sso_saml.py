"""SAML sign-in through django-allauth's saml provider, as Steplab wants it (settings,
"Single sign-on"; README, "SAML"): one identity provider per organization, configured
from STEPLAB_SAML_PROVIDERS, each with its URLs under /accounts/saml/<id>/ (login/,
acs/, acs/finish/, metadata/) and its own role map, applied at every sign-in by the same
rules as OIDC's and LDAP's (annotation/projects/sso_roles.py).

allauth's views do the protocol (python3-saml checks the signature with xmlsec, the
audience, the recipient, the times, and that the response answers a request Steplab
made); this module adds what allauth leaves open: the assertion consumer answers 404 for
an organization that is not configured, like the other SAML URLs, and single logout is
not offered (signing out of Steplab signs out of Steplab only)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import wraps

import xmlsec
from allauth.socialaccount.models import SocialLogin
from allauth.socialaccount.providers.saml import views as saml_views
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt
from lxml import etree
from onelogin.saml2.errors import OneLogin_Saml2_ValidationError
from onelogin.saml2.xmlparser import DTDForbidden, EntitiesForbidden, NotSupportedError

from annotation.projects.sso_roles import claim_groups, group_roles_apply
from annotation.sso_saml_idp import IdpMetadataUnavailable, saml_provider

logger = logging.getLogger(__name__)

# What python3-saml raises, past allauth, while it reads a posted response before any
# check (OneLogin_Saml2_Response's constructor): not XML, a DTD or entities, an
# EncryptedAssertion that is malformed or not encrypted to Steplab's key.
_UNREADABLE_RESPONSE = (
    etree.LxmlError,
    DTDForbidden,
    EntitiesForbidden,
    NotSupportedError,
    OneLogin_Saml2_ValidationError,
    xmlsec.Error,
)


@csrf_exempt
def acs(request: HttpRequest, organization_slug: str) -> HttpResponse:
    """The IdP's POST of its response (csrf-exempt: it comes from the IdP's page).
    allauth keeps any POST here for its finishing step; an organization that is not
    configured is a 404 at once, as at its other URLs."""
    if saml_provider(organization_slug) is None:
        raise Http404("No such SAML provider.")
    response: HttpResponse = saml_views.acs(request, organization_slug=organization_slug)
    return response


def _idp_metadata_guarded(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """allauth's ``view``, but for an IdP known by a metadata URL that has not answered
    yet: "Sign-in failed" (the log names the URL), 503 since trying later may work; and
    for a posted response python3-saml cannot read (whoever posts to the assertion
    consumer chooses it): "Sign-in failed", 400, not a server error.
    ``wraps`` keeps the marks allauth's view carries (login not required)."""

    @wraps(view)
    def guarded(request: HttpRequest, organization_slug: str) -> HttpResponse:
        try:
            return view(request, organization_slug=organization_slug)
        except IdpMetadataUnavailable:
            return render(request, "socialaccount/authentication_error.html", status=503)
        except _UNREADABLE_RESPONSE as exc:
            logger.warning("SAML %s: the response cannot be read: %r", organization_slug, exc)
            return render(request, "socialaccount/authentication_error.html", status=400)

    return guarded


# The "Sign in with" button's POST, answered by the redirect to the IdP with the
# AuthnRequest (signed if the organization's entry says so); and the finishing step,
# which checks the response the assertion consumer kept and signs in.
login = _idp_metadata_guarded(saml_views.login)
finish_acs = _idp_metadata_guarded(saml_views.finish_acs)


def sls(request: HttpRequest, organization_slug: str) -> HttpResponse:
    """Single logout is not offered: an unsigned logout request would sign people out
    from another site's page. The URL exists because allauth names it in the metadata."""
    raise Http404("Single logout is not offered.")


def saml_roles_apply(*, user: User, sociallogin: SocialLogin) -> bool:
    """If this sign-in came through a SAML provider, set ``user``'s roles from its
    ``role_attribute``'s values by its ``role_map`` and return True; else False (the
    sign-in is OIDC's)."""
    provider = saml_provider(sociallogin.account.provider)
    if provider is None:
        return False
    attributes = sociallogin.account.extra_data or {}
    group_roles_apply(
        user=user,
        groups=claim_groups(attributes, provider["role_attribute"]),
        role_map=provider["role_map"],
        source=f"SAML {provider['id']}",
    )
    return True
