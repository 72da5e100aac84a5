"""The answer to an unhandled error. A lost database connection (PostgreSQL restarting,
a failover, a network blip) is not a bug in the request: it gets 503 with Retry-After, so
clients and load balancers retry instead of reporting a server fault. Everything else
keeps Django's 500."""

from __future__ import annotations

import sys

from django.db import InterfaceError, OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

RETRY_AFTER_SECONDS = 5
UNAVAILABLE_DETAIL = "The database is unavailable right now; retry shortly."


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: Django calls it inside its ``except`` block, so the exception being
    handled is still in ``sys.exc_info()``. (With DEBUG on, Django shows its debug page
    instead and this is not called.)"""
    error = sys.exc_info()[1]
    if not isinstance(error, OperationalError | InterfaceError):
        return defaults.server_error(request)
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": UNAVAILABLE_DETAIL}, status=503)
    else:
        response = HttpResponse(UNAVAILABLE_DETAIL, status=503, content_type="text/plain")
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response
