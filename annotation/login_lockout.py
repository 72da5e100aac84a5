"""Sign-in lockout (django-axes) as Steplab wants it: per username after a few failures;
per client address only after many, and then only for usernames that have not signed in
from that address lately; the client address by DRF's proxy rule; and a 429 that says why
(JSON under /api/, a page elsewhere)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_username, get_cool_off, get_lockout_message
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import validate_ipv46_address
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from rest_framework.throttling import BaseThrottle

from annotation.models import KnownSignIn


class LoginLockoutHandler(AxesDatabaseHandler):
    """Axes' database handler with two limits instead of one.

    Axes compares one number with AXES_FAILURE_LIMIT. With AXES_LOCKOUT_PARAMETERS
    ``["username", "ip_address"]`` its attempts come as two querysets in that order; the
    username's failures are that number, so an account is locked after
    AXES_FAILURE_LIMIT failures wherever they come from. The address's failures count
    only once they reach STEPLAB_LOGIN_ADDRESS_FAILURE_LIMIT, and then only against
    usernames that have not signed in from that address within
    STEPLAB_LOGIN_KNOWN_ADDRESS_DAYS (``KnownSignIn``): a guesser trying many usernames
    from a lab's one address is stopped, while the people who sign in there every day
    keep signing in, each held only by their own account's limit."""

    def get_failures(self, request: HttpRequest, credentials: dict | None = None) -> int:
        by_username, by_address = (
            attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0
            for attempts in self.get_user_attempts(request, credentials)
        )
        if by_address >= settings.STEPLAB_LOGIN_ADDRESS_FAILURE_LIMIT and not _known_here(
            username=get_client_username(request, credentials),
            address=getattr(request, "axes_ip_address", None),
        ):
            return max(by_username, settings.AXES_FAILURE_LIMIT)
        return by_username

    def user_logged_in(self, sender: Any, request: HttpRequest, user: Any, **kwargs: Any) -> None:
        super().user_logged_in(sender, request, user, **kwargs)
        sign_in_record(username=user.get_username(), address=request.axes_ip_address)  # type: ignore[attr-defined]


def _known_here(*, username: str | None, address: str | None) -> bool:
    if not username or not address:
        return False
    since = timezone.now() - timedelta(days=settings.STEPLAB_LOGIN_KNOWN_ADDRESS_DAYS)
    return KnownSignIn.objects.filter(
        username=username, address=address, last_at__gte=since
    ).exists()


def sign_in_record(*, username: str, address: str | None) -> None:
    """Remember that ``username`` signed in from ``address`` now (one upsert). Called for
    every successful sign-in: the login forms through Django's ``user_logged_in``, the
    token endpoint directly (it logs no session in)."""
    if not address:
        return
    try:
        validate_ipv46_address(address)
    except ValidationError:
        return  # not an address (a test client's "testserver" peer, say): nothing to key
    KnownSignIn.objects.bulk_create(
        [KnownSignIn(username=username, address=address, last_at=timezone.now())],
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
