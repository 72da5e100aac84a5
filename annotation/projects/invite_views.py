"""``/invite/``: where an invitation's link lands, for anyone (no sign-in needed).

The link is ``/invite/#<token>``: the token is in the fragment, which browsers never send,
so it is in no server's, proxy's or access log's request line and in no Referer. The
page's script reads it, takes it out of the address bar and posts it with the page's form
(CSRF-checked like every form). The server then keeps the invitation's id and its secret's
hash in the session (never the token) and answers with a redirect, so reloading shows the
invitation again and the token is never in a URL (Django's password-reset page does the
same). Without JavaScript a person pastes the link into the same form.

A link that opens no invitation is counted as a failed sign-in by django-axes, under one
name per client address (``invite-link:<address>``): past STEPLAB_INVITE_LINK_FAILURE_LIMIT
of them within the cool-off that address gets a 429 for links (``annotation.login_lockout``;
``manage.py axes_reset_ip`` lifts it). The bound is far above a sign-in's: a link's secret
is 256 random bits, so the bound only caps the work a guesser makes, and the people behind
one office address who mistype or half-paste their links do not lock each other out. A used,
expired or revoked link says so on a page of its own (410)."""

from __future__ import annotations

import hmac
from typing import Any

from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_credentials
from django.conf import settings
from django.contrib import messages
from django.contrib.auth import get_user_model, login
from django.contrib.auth.forms import UserCreationForm
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.debug import sensitive_post_parameters
from django.views.decorators.http import require_http_methods

from annotation.login_lockout import INVITE_LINK_PREFIX, client_address, lockout_response
from annotation.models import Invite, InviteState, Membership, Role
from annotation.projects.invite_reads import invite_find, invite_state, invite_token_read
from annotation.projects.invites import InviteUnusable, invite_accept
from annotation.sso import sso_providers
from annotation.sso_ldap import ldap_sign_in_name

SESSION_KEY = "steplab_invite"
# The backend a new account is signed in with (axes' own backend only refuses).
SIGN_IN_BACKEND = "django.contrib.auth.backends.ModelBackend"


def _link_credentials(request: HttpRequest) -> dict[str, Any]:
    """What axes counts invalid links under: one name per client address. Django's
    usernames cannot hold a colon, so no account shares it."""
    return get_credentials(f"{INVITE_LINK_PREFIX}{client_address(request)}")


def _session_invite(request: HttpRequest) -> Invite | None:
    """The invitation whose link this browser opened, if its secret still matches."""
    held = request.session.get(SESSION_KEY)
    if not isinstance(held, dict) or not isinstance(held.get("id"), int):
        return None
    invite_id: int = held["id"]
    invite = (
        Invite.objects.select_related("project", "user", "invited_by").filter(pk=invite_id).first()
    )
    if invite is None or not hmac.compare_digest(invite.token_hash, str(held.get("hash"))):
        return None
    return invite


def _page(
    request: HttpRequest,
    *,
    state: str,
    invite: Invite | None = None,
    status: int = 200,
    **extra: Any,
) -> HttpResponse:
    context = {
        "state": state,
        "invite": invite,
        "local_passwords": settings.STEPLAB_LOCAL_PASSWORDS,
        "sso_providers": sso_providers(),
        "ldap_name": ldap_sign_in_name(),
        **extra,
    }
    if invite is not None:
        context["role"] = Role(invite.role).label
        context["inviter"] = invite.invited_by
    return render(request, "annotation/invite.html", context, status=status)


class _SignupForm(UserCreationForm):
    """Django's sign-up form with a weak password's reasons under the password itself:
    Django puts them under the confirmation box, where a person looks for "the two do
    not match", not for "too short"."""

    def validate_password_for_user(
        self, user: Any, password_field_name: str = "password1", **kwargs: Any
    ) -> None:
        # SetPasswordMixin's (Django 5.1+), which the type stubs do not know yet.
        parent = super().validate_password_for_user  # type: ignore[misc]
        parent(user, password_field_name=password_field_name, **kwargs)


def _signup_form(invite: Invite, data: Any = None) -> UserCreationForm:
    # The instance carries the address and name, so the similarity validator compares the
    # password with them too.
    return _SignupForm(data, instance=get_user_model()(email=invite.email, first_name=invite.name))


def _show(
    request: HttpRequest, *, form: UserCreationForm | None = None, error: str = ""
) -> HttpResponse:
    invite = _session_invite(request)
    if invite is None:
        return _page(request, state="open")
    state = invite_state(invite)
    if state != InviteState.PENDING:
        return _page(request, state=state, invite=invite, status=410)
    user = request.user
    member_role = (
        Membership.objects.filter(project=invite.project, user=user)
        .values_list("role", flat=True)
        .first()
        if user.is_authenticated
        else None
    )
    wrong_account = invite.user is not None and (
        not user.is_authenticated or user.pk != invite.user.pk
    )
    if (
        form is None
        and not user.is_authenticated
        and invite.user is None
        and settings.STEPLAB_LOCAL_PASSWORDS
    ):
        form = _signup_form(invite)
    return _page(
        request,
        state="pending",
        invite=invite,
        form=form,
        error=error,
        member_role=Role(member_role).label if member_role else "",
        wrong_account=wrong_account,
        status=400 if error or (form is not None and form.errors) else 200,
    )


def _open(request: HttpRequest) -> HttpResponse:
    """The token the page posted: a matching invitation goes into the session and the
    browser comes back with a GET; anything else counts against the address."""
    raw = request.POST.get("token", "")
    if not raw.strip():
        return _page(request, state="open", error="Paste the link from your invitation.")
    credentials = _link_credentials(request)
    if not AxesProxyHandler.is_allowed(request, credentials):
        return lockout_response(request, None, credentials)
    token = invite_token_read(raw)
    invite = invite_find(token=token) if token else None
    if invite is None:
        request.session.pop(SESSION_KEY, None)
        # Axes' middleware answers 429 instead once this failure reaches the limit.
        AxesProxyHandler.user_login_failed(
            sender=invite_page, credentials=credentials, request=request
        )
        return _page(request, state="unknown", status=404)
    request.session[SESSION_KEY] = {"id": invite.pk, "hash": invite.token_hash}
    return redirect("invite")


def _accept(request: HttpRequest) -> HttpResponse:
    invite = _session_invite(request)
    if invite is None:
        return redirect("invite")
    form = None
    try:
        if request.user.is_authenticated:
            accepted = invite_accept(
                invite_id=invite.pk, token_hash=invite.token_hash, user=request.user
            )
        elif not settings.STEPLAB_LOCAL_PASSWORDS:
            invite_accept(invite_id=invite.pk, token_hash=invite.token_hash, user=None)
        else:
            form = _signup_form(invite, request.POST)
            if not form.is_valid():
                return _show(request, form=form)
            accepted = invite_accept(
                invite_id=invite.pk,
                token_hash=invite.token_hash,
                user=None,
                username=form.cleaned_data["username"],
                password=form.cleaned_data["password1"],
            )
    except InviteUnusable:
        return _show(request)  # it says why: used, expired or revoked meanwhile
    except ValidationError as exc:
        if form is None or not hasattr(exc, "error_dict"):
            return _show(request, form=form, error=" ".join(exc.messages))
        for field, problems in exc.message_dict.items():
            # The service's "password" is the form's first box, as the form's own (above).
            field = "password1" if field == "password" else field
            form.add_error(field if field in form.fields else None, problems)
        return _show(request, form=form)
    if accepted.new_account:
        login(request, accepted.user, backend=SIGN_IN_BACKEND)
    request.session.pop(SESSION_KEY, None)
    project = accepted.membership.project
    messages.success(
        request,
        f"Welcome, {accepted.user.get_username()}: you joined {project.name} as "
        f"{Role(accepted.membership.role).label}.",
    )
    return redirect("project-overview", project_id=project.pk)


@never_cache
@sensitive_post_parameters("token", "password1", "password2")
@require_http_methods(["GET", "POST"])
def invite_page(request: HttpRequest) -> HttpResponse:
    """GET: the invitation this browser opened (or the form to open one). POST
    ``action=open`` with ``token``: open a link; ``action=accept``: accept the opened
    invitation, as the signed-in account or as a new one (``username``, ``password1``,
    ``password2``; Django's password validators)."""
    if request.method == "POST":
        return _accept(request) if request.POST.get("action") == "accept" else _open(request)
    return _show(request)
