"""One exception handler for the whole API (``REST_FRAMEWORK["EXCEPTION_HANDLER"]``).

The data layer raises Django's and the queue's own errors (it does not depend on DRF);
this turns them into DRF's before DRF's handler renders them, so no view wraps its
service calls: Django's ValidationError is a 400 with field errors, a missing assignment
a 404, a lost or closed lease a 409 whose ``code`` tells which, a busy queue a 503, a
start past the bound on waiting runs a 429 that lists what waits. The
queue's token door (``labeling.api.token_door.QueueView``) answers its errors through this same
handler."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers, status
from rest_framework.exceptions import APIException, NotFound
from rest_framework.response import Response
from rest_framework.settings import api_settings
from rest_framework.views import exception_handler as drf_exception_handler

from annotation.labeling.queue.errors import LeaseConflict, QueueBusy, RevisionClosed
from annotation.models import Assignment
from annotation.work_limits import TooManyWaiting


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "The lease can no longer be used."
    default_code = "lease_conflict"


class ServiceUnavailable(APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "Try again."
    default_code = "queue_busy"


class TooManyRequests(APIException):
    status_code = status.HTTP_429_TOO_MANY_REQUESTS
    default_detail = "Too much of this work waits already."
    default_code = "runs_waiting"


def validation_error_detail(exc: DjangoValidationError) -> dict[str, list[str]] | list[str]:
    """Django's error structure in DRF's shape (``__all__`` becomes ``non_field_errors``)."""
    if hasattr(exc, "error_dict"):
        return {
            (api_settings.NON_FIELD_ERRORS_KEY if field == NON_FIELD_ERRORS else field): messages
            for field, messages in exc.message_dict.items()
        }
    return list(exc.messages)


def as_api_error(exc: Exception) -> Exception:
    """The DRF error a data-layer error stands for; any other exception as it is."""
    if isinstance(exc, DjangoValidationError):
        return serializers.ValidationError(validation_error_detail(exc))
    if isinstance(exc, Assignment.DoesNotExist):
        return NotFound("No such assignment.")
    if isinstance(exc, LeaseConflict):
        # The code tells a client a lost lease ("lease_lost": ask for the next chain) from a
        # closed one ("lease_closed": already submitted or skipped).
        return Conflict({"detail": exc.message, "code": exc.code})
    if isinstance(exc, RevisionClosed):
        return Conflict({"detail": exc.message, "code": exc.code})
    if isinstance(exc, TooManyWaiting):
        error = TooManyRequests()
        # Set after the constructor, which would turn every number and id into a string.
        payload: Any = {
            "detail": exc.detail,
            "code": "runs_waiting",
            "limit": exc.limit,
            "waiting": exc.waiting,
        }
        error.detail = payload
        return error
    if isinstance(exc, QueueBusy):
        return ServiceUnavailable({"detail": exc.message, "code": exc.code})
    return exc


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler over ``as_api_error(exc)``; None (a 500 from Django) for a bug."""
    return drf_exception_handler(as_api_error(exc), context)
