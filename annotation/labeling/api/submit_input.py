"""The submit's input: its serializers (which the schema and DRF's door use) and
``submit_input_validate``, which runs the same fields and messages without building a
serializer per request and per rating (the token door's and the workspace's submit)."""

from __future__ import annotations

from typing import Any, cast

from rest_framework import serializers
from rest_framework.fields import empty

from annotation.api.fields import INT32_MAX, IdField, RatingField
from annotation.api.inputs import InputSerializer, unknown_field_errors
from annotation.labeling.queue.submit import REQUEST_ID_MAX_LENGTH, RatingInput


class RatingInputSerializer(InputSerializer):
    step = IdField(help_text="The id of a step of the leased chain, as next showed it.")
    # Range-checked by the service, whose message names the step.
    rating = RatingField(help_text="-1 (incorrect), 0 (ambiguous) or 1 (correct).")
    comment = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=10_000, trim_whitespace=True
    )
    duration_ms = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        min_value=0,
        max_value=INT32_MAX,
        help_text="How long the step held the annotator's focus.",
    )


class SubmitInputSerializer(InputSerializer):
    ratings = RatingInputSerializer(many=True, allow_empty=False)
    rewrite = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=20_000,
        help_text="The corrected text of the first incorrect step (needs a -1 rating).",
    )
    duration_ms = serializers.IntegerField(
        required=False, allow_null=True, default=None, min_value=0, max_value=INT32_MAX
    )
    request_id = serializers.CharField(
        required=False,
        allow_blank=True,
        default="",
        max_length=REQUEST_ID_MAX_LENGTH,
        help_text="A client-chosen id; repeating a submit with it changes nothing.",
    )


# The serializers' own fields, bound once: ``submit_input_validate`` runs them.
_SUBMIT_FIELDS = SubmitInputSerializer().fields
_RATINGS_LIST = cast(serializers.ListSerializer, _SUBMIT_FIELDS["ratings"])
_RATING_ITEM = RatingInputSerializer()
_RATING_FIELDS = _RATING_ITEM.fields


def _field_value(field: serializers.Field, data: dict, errors: dict[str, Any]) -> Any:
    """What ``field`` takes from ``data``, as its serializer would. Three common cases are
    taken without the field's conversion and validator calls, with the same outcome at a
    tenth of the cost: a plain int within an integer field's bounds, an empty string for a
    field that allows blanks, and an absent optional field (its default)."""
    value = data.get(field.field_name, empty)
    if type(value) is int:
        if (
            isinstance(field, serializers.IntegerField)
            and (field.min_value is None or value >= field.min_value)
            and (field.max_value is None or value <= field.max_value)
        ):
            return value
    elif value == "" and type(value) is str:
        if getattr(field, "allow_blank", False):
            return value
    elif (
        value is empty
        and not field.required
        and field.default is not empty
        and not callable(field.default)
    ):
        return field.default
    try:
        return field.run_validation(value)
    except serializers.ValidationError as exc:
        errors[field.field_name or ""] = exc.detail
        return None


def _fields_validate(
    fields: Any, data: dict, known: Any = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``data``'s values and errors for ``fields``; a key of ``data`` not in ``known``
    (default: ``fields``) is an error too, as ``InputSerializer`` makes it."""
    errors: dict[str, Any] = {}
    values = {name: _field_value(field, data, errors) for name, field in fields.items()}
    if not data.keys() <= fields.keys():
        errors.update(unknown_field_errors(data, fields if known is None else known))
    return values, errors


def submit_input_validate(data: Any) -> dict[str, Any]:
    """The validated submit body: ``SubmitInputSerializer``'s fields and messages (a 400
    names each field, and each rating by its place in the list), run without building a
    serializer per request and per rating, which cost more than the submit's queries. The
    list's own checks (a list, not empty), a rating that is not an object and a body that
    is not a JSON object (a form's fields, say) are left to DRF's serializers."""
    if type(data) is not dict:
        serializer = SubmitInputSerializer(data=data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data
    ratings: list[dict[str, Any]] = []
    rating_errors: Any = {}  # by place in the list, as DRF's list reports them
    items = data.get("ratings", empty)
    if type(items) is not list or not items:
        try:
            _RATINGS_LIST.run_validation(items)  # raises DRF's message for the list
        except serializers.ValidationError as exc:
            rating_errors = exc.detail
        items = []
    for index, item in enumerate(items):
        if type(item) is dict:
            rating, errors = _fields_validate(_RATING_FIELDS, item)
        else:
            rating, errors = {}, {}
            try:
                _RATING_ITEM.run_validation(item)
            except serializers.ValidationError as exc:
                errors = exc.detail  # type: ignore[assignment]  # DRF's "not an object"
        ratings.append(rating)
        if errors:
            rating_errors[index] = errors
    other = {name: field for name, field in _SUBMIT_FIELDS.items() if name != "ratings"}
    validated, errors = _fields_validate(other, data, _SUBMIT_FIELDS)
    if rating_errors:
        errors = {"ratings": rating_errors, **errors}
    if errors:
        raise serializers.ValidationError(errors)
    return {"ratings": ratings, **validated}


def ratings_from_payload(data: dict[str, Any]) -> list[RatingInput]:
    """The service's rating inputs from a validated submit body: steps named by their
    public ids, which the service reads back against the leased chain's steps
    (``public_step_ids``)."""
    return [
        RatingInput(
            step_id=r["step"],
            rating=int(r["rating"]),
            comment=r["comment"],
            duration_ms=r["duration_ms"],
        )
        for r in data["ratings"]
    ]
