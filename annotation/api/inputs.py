"""Every request body is read by an input serializer that refuses the fields it does not
name: a misspelt or stray field (``"proceses": 4``, ``"name"`` in a PATCH that cannot
rename) is a 400 naming it, never a silent no-op that looks like success.

``InputSerializer`` is the base of every input serializer (nested ones too, so a rating
in a submit or a training config in the settings refuses unknown keys alike); the
submit's hand-run validation (``labeling.api.submit_input.submit_input_validate``) calls
``unknown_field_errors`` itself."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

UNKNOWN_FIELD = "This field cannot be set here."
# A form post from the browsable API carries its CSRF token as a field.
_FORM_FIELDS = frozenset({"csrfmiddlewaretoken"})


def unknown_field_errors(data: Any, fields: Mapping[str, Any]) -> dict[str, list[str]]:
    """``{field: [UNKNOWN_FIELD]}`` for each key of ``data`` that is not in ``fields``
    (nothing when ``data`` is not a mapping: the serializer says what it should be)."""
    if not isinstance(data, Mapping):
        return {}
    return {
        str(key): [UNKNOWN_FIELD] for key in data if key not in fields and key not in _FORM_FIELDS
    }


class InputSerializer(serializers.Serializer):
    """A serializer of a request body that refuses the fields it does not name, reported
    together with the errors of the fields it does."""

    def to_internal_value(self, data: Any) -> Any:
        unknown = unknown_field_errors(data, self.fields)
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **unknown}) from None
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value
