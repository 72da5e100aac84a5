"""`/healthz`: is this process able to serve? For load balancers, Docker health checks and
the process bring-up test. No authentication and no data: it says only whether the
database and the task broker answer.

It is answered by ``HealthCheckMiddleware``, placed first, so a probe that reaches the
container by its internal name or over plain HTTP is neither refused by ALLOWED_HOSTS
nor redirected to HTTPS; the URL route exists so the endpoint is listed and reachable
in every profile."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from django.conf import settings
from django.db import connections
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache

logger = logging.getLogger(__name__)

HEALTH_PATH = "/healthz"
# A probe must answer quickly even when a dependency hangs: the broker gets this long.
BROKER_TIMEOUT_SECONDS = 2.0


def _database_ok() -> bool:
    try:
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT 1")
            return cursor.fetchone() == (1,)
    except Exception:  # noqa: BLE001 - any failure means "not healthy", logged below
        logger.warning("healthz: database check failed", exc_info=True)
        return False


def _broker_state() -> str:
    """ "ok" or "down": whether a message can be handed to the broker (Redis, or the
    folder broker of the embedded default) within BROKER_TIMEOUT_SECONDS."""
    from config.celery import app

    if settings.CELERY_BROKER_URL == "filesystem://":
        # A folder broker connects to nothing: it is up when its folder takes files.
        folder = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("data_folder_out", "")
        return "ok" if folder and os.access(folder, os.W_OK | os.X_OK) else "down"
    try:
        with app.connection_for_write(url=settings.CELERY_BROKER_URL) as connection:
            connection.ensure_connection(
                max_retries=1, interval_start=0, timeout=BROKER_TIMEOUT_SECONDS
            )
        return "ok"
    except Exception:  # noqa: BLE001 - any failure means "not healthy", logged below
        logger.warning("healthz: broker check failed", exc_info=True)
        return "down"


@never_cache
def healthz(request: HttpRequest) -> HttpResponse:
    """200 with {"status": "ok", ...} when the database and the broker answer, else 503.
    Only GET and HEAD; the body names the failing part and nothing else."""
    if request.method not in ("GET", "HEAD"):
        return JsonResponse(
            {"detail": "method not allowed"}, status=405, headers={"Allow": "GET, HEAD"}
        )
    database = "ok" if _database_ok() else "down"
    broker = _broker_state()
    healthy = database == "ok" and broker != "down"
    return JsonResponse(
        {"status": "ok" if healthy else "unavailable", "database": database, "broker": broker},
        status=200 if healthy else 503,
    )


class HealthCheckMiddleware:
    """Answers `/healthz` before host validation, the HTTPS redirect and sessions."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path_info.rstrip("/") == HEALTH_PATH:
            return healthz(request)
        return self.get_response(request)
