"""Sign-in lockout (django-axes) as Steplab wants it. Failures are counted per username
*and* address: a guesser locks a username at their own address, never for its owner
elsewhere. Two site-wide bounds stop a guesser who moves: a username's failures from
every address together (STEPLAB_LOGIN_USERNAME_FAILURE_LIMIT) and an address's failures
over every username (STEPLAB_LOGIN_ADDRESS_FAILURE_LIMIT) lock it, but only for the
addresses and usernames that have not signed in together lately (``KnownSignIn``), so the
people who work there keep signing in. A username is counted in one spelling
(``username_fold``), the loosest any backend compares by: a directory matches "Lena" and
"LENA" as "lena", so letter case buys no more guesses. Invitation links that open nothing
are counted per address against their own bound (STEPLAB_INVITE_LINK_FAILURE_LIMIT). The
client address by DRF's proxy rule; a 429 that says why (JSON under /api/, a page
elsewhere)."""

from __future__ import annotations

import unicodedata
from datetime import timedelta
from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_cool_off, get_lockout_message
from axes.models import AccessAttempt
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_ipv46_address
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from rest_framework.throttling import BaseThrottle

from annotation.models import KnownSignIn

# The name invalid invitation links are counted under, before the client's address
# (annotation/projects/invite_views.py). Django's usernames hold no colon.
INVITE_LINK_PREFIX = "invite-link:"


def username_fold(username: str) -> str:
    """The one spelling a username is counted under: compatibility forms folded (NFKC),
    letter case folded, runs of spaces made one and spaces at the ends dropped, as an
    LDAP directory's caseIgnoreMatch compares names.

    >>> [username_fold(name) for name in ("Lena", " LENA ", "\uff4c\uff45\uff4e\uff41")]
    ['lena', 'lena', 'lena']
    """
    return " ".join(unicodedata.normalize("NFKC", username).casefold().split())


def lockout_username(request: HttpRequest, credentials: dict[str, Any] | None) -> str | None:
    """AXES_USERNAME_CALLABLE: the folded username of an attempt (axes' own lookup: the
    credentials, else the posted form or body)."""
    field = getattr(settings, "AXES_USERNAME_FORM_FIELD", "username")
    if credentials:
        raw = credentials.get(field)
    else:
        data = getattr(request, "data", None) or request.POST
        raw = data.get(field) if hasattr(data, "get") else None
    return username_fold(raw) if isinstance(raw, str) else None


class LoginLockoutHandler(AxesDatabaseHandler):
    """Axes' database handler with Steplab's limits (the module's docstring).

    Axes compares one number with AXES_FAILURE_LIMIT. With AXES_LOCKOUT_PARAMETERS
    ``[["username", "ip_address"], "username", "ip_address"]`` its attempts come as three
    querysets in that order: the pair's failures are that number, unless a site-wide bound
    is reached and the username has not signed in from this address lately."""

    def get_failures(self, request: HttpRequest, credentials: dict | None = None) -> int:
        pair, by_username, by_address = (
            attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0
            for attempts in self.get_user_attempts(request, credentials)
        )
        limit = settings.AXES_FAILURE_LIMIT
        username = get_client_username(request, credentials)
        if username and username.startswith(INVITE_LINK_PREFIX):
            return limit if pair >= settings.STEPLAB_INVITE_LINK_FAILURE_LIMIT else 0
        spread = by_username >= settings.STEPLAB_LOGIN_USERNAME_FAILURE_LIMIT
        sprayed = by_address >= settings.STEPLAB_LOGIN_ADDRESS_FAILURE_LIMIT
        if (spread or sprayed) and not _known_here(
            username=username, address=getattr(request, "axes_ip_address", None)
        ):
            return max(pair, limit)
        return pair

    def user_login_failed(
        self, sender: Any, credentials: dict, request: HttpRequest | None = None, **kwargs: Any
    ) -> None:
        """Axes' count of the failure, without the form fields it would keep: it appends
        the request's query and form (up to 1 KB each) to the attempt's row at every
        failure, lockout included, so a guesser grew one row by two kilobytes a try for as
        long as they liked. Axes is handed empty ones, and the separators it still appends
        are cleared, so the row keeps what it is counted by and axes' truncated headers."""
        if request is None:
            super().user_login_failed(sender, credentials, request, **kwargs)
            return
        query, form = request.GET, request.POST
        request.GET = request.POST = QueryDict()
        try:
            super().user_login_failed(sender, credentials, request, **kwargs)
        finally:
            request.GET, request.POST = query, form
        AccessAttempt.objects.filter(
            username=get_client_username(request, credentials),
            ip_address=getattr(request, "axes_ip_address", None),
            user_agent=getattr(request, "axes_user_agent", ""),
        ).exclude(get_data="", post_data="").update(get_data="", post_data="")

    def user_logged_in(self, sender: Any, request: HttpRequest, user: Any, **kwargs: Any) -> None:
        super().user_logged_in(sender, request, user, **kwargs)
        sign_in_record(username=user.get_username(), address=request.axes_ip_address)  # type: ignore[attr-defined]


def _known_here(*, username: str | None, address: str | None) -> bool:
    if not username or not address:
        return False
    since = timezone.now() - timedelta(days=settings.STEPLAB_LOGIN_KNOWN_ADDRESS_DAYS)
    return KnownSignIn.objects.filter(
        username=username_fold(username), address=address, last_at__gte=since
    ).exists()


def sign_in_record(*, username: str, address: str | None) -> None:
    """Remember that ``username`` (folded) signed in from ``address`` now (one upsert). Called for
    every successful sign-in: the login forms through Django's ``user_logged_in``, the
    token endpoint directly (it logs no session in)."""
    if not address:
        return
    try:
        validate_ipv46_address(address)
    except ValidationError:
        return  # not an address (a test client's "testserver" peer, say): nothing to key
    KnownSignIn.objects.bulk_create(
        [KnownSignIn(username=username_fold(username), address=address, last_at=timezone.now())],
        update_conflicts=True,
        unique_fields=["username", "address"],
        update_fields=["last_at"],
    )


def client_address(request: HttpRequest) -> str | None:
    """The client's address as DRF's throttles see it: X-Forwarded-For only through the
    STEPLAB_NUM_PROXIES proxies we trust, else the socket's address."""
    return BaseThrottle().get_ident(request)  # type: ignore[arg-type]


def lockout_response(
    request: HttpRequest, original_response: HttpResponse | None, credentials: Any = None
) -> HttpResponse:
    cool_off = get_cool_off(request)
    retry_after = int(cool_off.total_seconds()) if cool_off else None
    minutes = max(1, (retry_after or 0) // 60)
    # The invitation page counts links that open nothing (annotation/projects/invite_views.py).
    invite_links = request.path == reverse("invite")
    what = (
        "invitation links that open nothing from this address"
        if invite_links
        else "failed sign-ins for this account or address"
    )
    reason = (
        f"Too many {what}. Try again in {minutes} minutes, or ask an administrator to unlock it."
        if retry_after
        else str(get_lockout_message())
    )
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": reason}, status=429)
    else:
        title = "Invitation links locked" if invite_links else "Sign-in locked"
        context = {"reason": reason, "title": title}
        response = render(request, "registration/locked_out.html", context, status=429)
    if retry_after:
        response["Retry-After"] = str(retry_after)
    return response
