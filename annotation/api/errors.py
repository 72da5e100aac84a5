"""The data layer raises Django's ValidationError (it does not depend on DRF); this turns
it into a 400 with field errors where an endpoint calls a service."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.core.exceptions import NON_FIELD_ERRORS
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers
from rest_framework.settings import api_settings


def validation_error_detail(exc: DjangoValidationError) -> dict[str, list[str]] | list[str]:
    """Django's error structure in DRF's shape (``__all__`` becomes ``non_field_errors``)."""
    if hasattr(exc, "error_dict"):
        return {
            (api_settings.NON_FIELD_ERRORS_KEY if field == NON_FIELD_ERRORS else field): messages
            for field, messages in exc.message_dict.items()
        }
    return list(exc.messages)


@contextmanager
def service_errors_as_400() -> Iterator[None]:
    try:
        yield
    except DjangoValidationError as exc:
        raise serializers.ValidationError(validation_error_detail(exc)) from exc
