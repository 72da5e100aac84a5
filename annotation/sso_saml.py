"""SAML sign-in through django-allauth's saml provider, as Steplab wants it (settings,
"Single sign-on"; README, "SAML"): one identity provider per organization, configured
from STEPLAB_SAML_PROVIDERS, each with its URLs under /accounts/saml/<id>/ (login/,
acs/, acs/finish/, metadata/) and its own role map, applied at every sign-in by the same
rules as OIDC's and LDAP's (annotation/projects/sso_roles.py).

allauth's views do the protocol (python3-saml checks the signature with xmlsec, the
audience, the recipient, the times, and that the response answers a request Steplab
made); this module adds what allauth leaves open: the assertion consumer answers 404 for
an organization that is not configured, like the other SAML URLs, and single logout is
not offered (signing out of Steplab signs out of Steplab only).

The assertion consumer is Steplab's own. allauth's wrote whatever anyone posted to it
into a session row before any check (an 8 MB body was an 8 MB row, kept two weeks),
since the browser's session cookie does not come with the IdP's cross-site POST and the
check that the response answers this browser's request waits for the finishing step.
Here a body over STEPLAB_SAML_MAX_BODY_BYTES is refused unread (413); the response's
XML is read within STEPLAB_SAML_MAX_ELEMENTS elements and STEPLAB_SAML_MAX_DEPTH levels
before python3-saml parses it, and python3-saml checks it (signature, audience,
recipient, times) before anything is stored; only then is the response alone (with
the few request headers the finishing step rebuilds its URLs from) kept, for five
minutes, in a session row bounded by the body limit. The finishing step checks it
again, with the browser's session, as allauth does."""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable
from functools import wraps
from typing import Any

import xmlsec
from allauth.socialaccount.helpers import render_authentication_error
from allauth.socialaccount.models import SocialLogin
from allauth.socialaccount.providers.saml import utils as saml_utils
from allauth.socialaccount.providers.saml import views as saml_views
from allauth.socialaccount.sessions import LoginSession
from django.conf import settings
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt
from lxml import etree
from onelogin.saml2.errors import OneLogin_Saml2_Error, OneLogin_Saml2_ValidationError
from onelogin.saml2.xmlparser import DTDForbidden, EntitiesForbidden, NotSupportedError

from annotation.projects.sso_roles import claim_groups, group_roles_apply
from annotation.sessions import SessionStore
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


# What the finishing step rebuilds the assertion consumer's URL from (python3-saml checks
# the response's Destination against it): the host, port, script prefix and scheme, and
# the proxy headers Django may read them from. Nothing else of the request is kept.
_KEPT_META = (
    "HTTP_HOST",
    "SERVER_NAME",
    "SERVER_PORT",
    "SCRIPT_NAME",
    "PATH_INFO",
    "REQUEST_METHOD",
    "wsgi.url_scheme",
    "HTTP_X_FORWARDED_HOST",
    "HTTP_X_FORWARDED_PORT",
    "HTTP_X_FORWARDED_PROTO",
)
_KEPT_HEADER_MAX_CHARS = 1024
# A RelayState is at most 80 bytes by the SAML bindings; an IdP-initiated one a URL.
_RELAY_STATE_MAX_CHARS = 2048
# The finishing step follows at once (a redirect); a row nobody finishes goes after this.
ACS_SESSION_SECONDS = 300


class _AcsSessionStore(SessionStore):
    """The assertion consumer's row: a checked response of at most the body limit."""

    anonymous_max_seconds = ACS_SESSION_SECONDS
    # Signed as any session is, so the finishing step's plain store reads it.
    key_salt = "django.contrib.sessions." + SessionStore.__qualname__

    @property
    def anonymous_max_bytes(self) -> int:  # type: ignore[override]
        return int(settings.STEPLAB_SAML_MAX_BODY_BYTES) + 16 * 1024


class _XmlTooBig(Exception):
    pass


class _XmlGauge:
    """An lxml parser target that builds nothing: it counts elements and levels and
    stops the parse at the first past a limit, or at a DTD."""

    def __init__(self, *, max_elements: int, max_depth: int) -> None:
        self.max_elements, self.max_depth = max_elements, max_depth
        self.elements = self.depth = 0

    def doctype(self, *args: Any) -> None:
        raise _XmlTooBig("a DTD")

    def start(self, tag: str, attrib: Any, nsmap: Any = None) -> None:
        self.elements += 1
        self.depth += 1
        if self.elements > self.max_elements:
            raise _XmlTooBig(f"more than {self.max_elements:,} elements")
        if self.depth > self.max_depth:
            raise _XmlTooBig(f"nested deeper than {self.max_depth} levels")

    def end(self, tag: str) -> None:
        self.depth -= 1

    def data(self, data: str) -> None:
        pass

    def close(self) -> None:
        return None


def saml_response_problem(encoded: str) -> str | None:
    """Why a posted SAMLResponse is not read any further (not base64, not XML, a DTD,
    more elements or levels than STEPLAB_SAML_MAX_ELEMENTS and STEPLAB_SAML_MAX_DEPTH),
    or None. The XML is scanned by a parser that keeps no tree, so what a scan costs is
    bounded by the body limit, whatever the XML holds."""
    try:
        xml = base64.b64decode(encoded, validate=False)
    except (binascii.Error, ValueError):
        return "not base64"
    gauge = _XmlGauge(
        max_elements=settings.STEPLAB_SAML_MAX_ELEMENTS, max_depth=settings.STEPLAB_SAML_MAX_DEPTH
    )
    parser = etree.XMLParser(
        target=gauge, resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False
    )
    try:
        etree.fromstring(xml, parser)
    except _XmlTooBig as exc:
        return str(exc)
    except etree.LxmlError as exc:
        return f"not XML ({exc})"
    return None


def _failed(request: HttpRequest, status: int) -> HttpResponse:
    return render(request, "socialaccount/authentication_error.html", status=status)


def _acs_request_kept(request: HttpRequest, fields: dict[str, str]) -> str | None:
    """The request the finishing step rebuilds (allauth's ``httpkit.serialize_request``
    layout) from ``fields`` and ``_KEPT_META`` alone; None when a kept header is longer
    than any real one."""
    meta = {key: request.META[key] for key in _KEPT_META if isinstance(request.META.get(key), str)}
    if any(len(value) > _KEPT_HEADER_MAX_CHARS for value in meta.values()):
        return None
    post = QueryDict(mutable=True)
    post.update(fields)
    return json.dumps(
        {
            "path": request.path,
            "path_info": request.path_info,
            "META": meta,
            "GET": "",
            "POST": post.urlencode(),
            "method": "POST",
            "scheme": request.scheme,
        }
    )


def _content_length(request: HttpRequest) -> int:
    try:
        return max(int(request.META.get("CONTENT_LENGTH") or 0), 0)
    except ValueError:
        return 0


@csrf_exempt
def acs(request: HttpRequest, organization_slug: str) -> HttpResponse:
    """The IdP's POST of its response (csrf-exempt: it comes from the IdP's page), checked
    before it is kept for the finishing step (module docstring): an organization that is
    not configured is a 404, a body over the limit a 413 unread, a response that is not
    base64 XML within the limits a 400, one python3-saml does not take (a signature that
    is not the IdP's, another audience or recipient, expired) a 401; nothing is stored
    for any of these."""
    if saml_provider(organization_slug) is None:
        raise Http404("No such SAML provider.")
    if request.method != "POST":
        return _failed(request, 405)
    most = settings.STEPLAB_SAML_MAX_BODY_BYTES
    if _content_length(request) > most:
        logger.warning(
            "SAML %s: a posted body over %d bytes, refused unread", organization_slug, most
        )
        return _failed(request, 413)
    encoded = request.POST.get("SAMLResponse", "")
    relay_state = request.POST.get("RelayState")
    problem = saml_response_problem(encoded)
    if problem is None and relay_state is not None and len(relay_state) > _RELAY_STATE_MAX_CHARS:
        problem = f"a RelayState over {_RELAY_STATE_MAX_CHARS} characters"
    if problem is not None:
        logger.warning("SAML %s: the response is not read: %s", organization_slug, problem)
        return _failed(request, 400)
    provider = saml_utils.get_app_or_404(request, organization_slug).get_provider(request)
    auth = saml_utils.build_auth(request, provider)
    try:
        auth.process_response(request_id=None)
        errors = auth.get_errors()
        reason = auth.get_last_error_reason()
    except (binascii.Error, OneLogin_Saml2_Error) as exc:
        errors, reason = ["invalid_response"], str(exc)
    if errors:
        return render_authentication_error(
            request,
            provider,
            extra_context={"saml_errors": errors, "saml_last_error_reason": reason},
        )
    fields = {"SAMLResponse": encoded}
    if relay_state is not None:
        fields["RelayState"] = relay_state
    kept = _acs_request_kept(request, fields)
    if kept is None:
        return _failed(request, 400)
    response = HttpResponseRedirect(
        reverse("saml_finish_acs", kwargs={"organization_slug": organization_slug})
    )
    request.saml_acs_session = _AcsSessionStore()  # type: ignore[attr-defined]
    acs_session = LoginSession(request, "saml_acs_session", "saml-acs-session")
    acs_session.store["request"] = kept
    acs_session.store.set_expiry(ACS_SESSION_SECONDS)
    acs_session.save(response)
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
# AuthnRequest (signed if the organization's entry says so); the assertion consumer; and
# the finishing step, which checks the response the assertion consumer kept and signs in.
login = _idp_metadata_guarded(saml_views.login)
acs = csrf_exempt(_idp_metadata_guarded(acs))
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
