"""Sign-in lockout (django-axes) as Steplab wants it: per username after a few failures,
per client address only after many, the client address by DRF's proxy rule, and a 429
that says why (JSON under /api/, a page elsewhere)."""

from __future__ import annotations

from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_cool_off, get_lockout_message
from django.conf import settings
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from rest_framework.throttling import BaseThrottle


class LoginLockoutHandler(AxesDatabaseHandler):
    """Axes' database handler with two limits instead of one.

    Axes compares one number with AXES_FAILURE_LIMIT. With AXES_LOCKOUT_PARAMETERS
    ``["username", "ip_address"]`` its attempts come as two querysets in that order; the
    username's failures are that number, and the address's count only once they reach
    STEPLAB_LOGIN_ADDRESS_FAILURE_LIMIT, so ten people's typos behind one office address
    lock no one, while one guesser trying many usernames from one address is stopped."""

    def get_failures(self, request: HttpRequest, credentials: dict | None = None) -> int:
        by_username, by_address = (
            attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0
            for attempts in self.get_user_attempts(request, credentials)
        )
        if by_address >= settings.STEPLAB_LOGIN_ADDRESS_FAILURE_LIMIT:
            return max(by_username, settings.AXES_FAILURE_LIMIT)
        return by_username


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
    reason = (
        f"Too many failed sign-ins for this account or address. Try again in {minutes} "
        "minutes, or ask an administrator to unlock it."
        if retry_after
        else str(get_lockout_message())
    )
    response: HttpResponse
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": reason}, status=429)
    else:
        response = render(request, "registration/locked_out.html", {"reason": reason}, status=429)
    if retry_after:
        response["Retry-After"] = str(retry_after)
    return response
