"""The API's one exception handler (``annotation/api/errors.py``): the data layer's errors
become status codes without any view wrapping its service calls."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import RequestFactory
from rest_framework.settings import api_settings

from annotation.api.errors import api_exception_handler
from annotation.labeling.queue.errors import LeaseClosed, LeaseLost, QueueBusy
from annotation.models import Assignment


def _answer(exc: Exception) -> tuple[int, object]:
    context = {"request": RequestFactory().post("/"), "view": None}
    response = api_exception_handler(exc, context)
    assert response is not None
    return response.status_code, response.data


def test_the_settings_name_the_handler() -> None:
    assert api_settings.EXCEPTION_HANDLER is api_exception_handler


@pytest.mark.parametrize(
    ("exc", "status", "data"),
    [
        (ValidationError({"name": "Too long."}), 400, {"name": ["Too long."]}),
        (ValidationError("Not now."), 400, ["Not now."]),
        (ValidationError({"__all__": "Both."}), 400, {"non_field_errors": ["Both."]}),
        (Assignment.DoesNotExist(), 404, {"detail": "No such assignment."}),
        (LeaseLost("Taken."), 409, {"detail": "Taken.", "code": "lease_lost"}),
        (LeaseClosed("Done."), 409, {"detail": "Done.", "code": "lease_closed"}),
        (QueueBusy("Again."), 503, {"detail": "Again.", "code": "queue_busy"}),
    ],
)
def test_a_data_layer_error_becomes_its_status(exc: Exception, status: int, data: object) -> None:
    assert _answer(exc) == (status, data)


def test_a_bug_stays_a_500() -> None:
    context = {"request": RequestFactory().post("/"), "view": None}
    assert api_exception_handler(KeyError("x"), context) is None
