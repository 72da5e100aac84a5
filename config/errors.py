"""The answers Django gives outside a view. A lost database connection (PostgreSQL
restarting, a failover, a network blip) is not a bug in the request: it gets 503 with
Retry-After, so clients and load balancers retry instead of reporting a server fault;
every other error keeps Django's 500, an OperationalError on a connection that is alive
included (psycopg refusing a statement of more than 65,535 parameters is a bug of the
statement, never an outage to retry). A body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is a
413 that names the limit. Under /api/ every one of these answers is JSON
(``{"detail": ...}``) like the API's own errors, never an HTML page."""

from __future__ import annotations

import sys

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import DEFAULT_DB_ALIAS, InterfaceError, OperationalError, connections
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults

RETRY_AFTER_SECONDS = 5
UNAVAILABLE_DETAIL = "The database is unavailable right now; retry shortly."
# SQLSTATE classes of a server that cannot serve now: connection exceptions (08),
# insufficient resources (53: too many connections, out of memory or disk), operator
# intervention (57P: shutting down, starting up).
_UNAVAILABLE_SQLSTATES = ("08", "53", "57P")


def database_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the database cannot be reached or cannot serve now, rather
    than that a statement was wrong: an InterfaceError (the connection is gone), an
    OperationalError with a SQLSTATE of ``_UNAVAILABLE_SQLSTATES``, or one on a
    connection that is closed or broken (psycopg failing to connect has no SQLSTATE)."""
    if isinstance(error, InterfaceError):
        return True
    if not isinstance(error, OperationalError):
        return False
    sqlstate = getattr(error.__cause__, "sqlstate", None)
    if sqlstate:
        return str(sqlstate).startswith(_UNAVAILABLE_SQLSTATES)
    raw = connections[DEFAULT_DB_ALIAS].connection
    if raw is None:
        return True
    if getattr(raw, "broken", False) or getattr(raw, "closed", False):
        return True
    # SQLite: a locked or busy file is the outage of the embedded default.
    return "locked" in str(error) or "unable to open" in str(error)


def server_error(request: HttpRequest) -> HttpResponse:
    """``handler500``: Django calls it inside its ``except`` block, so the exception being
    handled is still in ``sys.exc_info()``. (With DEBUG on, Django shows its debug page
    instead and this is not called.)"""
    error = sys.exc_info()[1]
    if error is None or not database_unavailable(error):
        return defaults.server_error(request)
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"detail": UNAVAILABLE_DETAIL}, status=503)
    else:
        response = HttpResponse(UNAVAILABLE_DETAIL, status=503, content_type="text/plain")
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def body_too_large_detail() -> str:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return f"Request body too large: the limit is {limit} bytes ({limit / 2**20:g} MiB)."


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler400``: Django's answer to a request it refused before any view (a
    SuspiciousOperation: a body over the size limit, too many fields, a bad host)."""
    if isinstance(exception, RequestDataTooBig):
        if _is_api(request):
            return JsonResponse({"detail": body_too_large_detail()}, status=413)
        return HttpResponse(body_too_large_detail(), status=413, content_type="text/plain")
    if _is_api(request):
        return JsonResponse({"detail": "Bad request."}, status=400)
    return defaults.bad_request(request, exception)


def page_not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """``handler404``: an API path that matches no route answers JSON like DRF's 404."""
    if _is_api(request):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)
