"""Bounds of integer inputs: what the column an input is stored in, or compared with,
holds. An unbounded integer either fails deep in the database driver (psycopg refuses an
int past 64 bits: a 500) or, sent as a wider type than its column and cast back, is not
what was stored (a snapshot seed of 2**40 came back as 0). Every integer an endpoint
reads carries its column's range, so a value past it is a 400 that says the range, and
the OpenAPI schema states it (``tests/test_integer_bounds.py`` checks both)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any

from rest_framework import pagination, serializers

from annotation.public_ids import PUBLIC_ID_MAX, PublicIds

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1  # integer (and the positive types) in PostgreSQL
BIGINT_MAX = 2**63 - 1  # bigint: every id (DEFAULT_AUTO_FIELD is BigAutoField)


def IdField(**kwargs: Any) -> serializers.IntegerField:  # noqa: N802 (a field factory)
    """An object id: 1 .. the largest bigint."""
    return serializers.IntegerField(min_value=1, max_value=BIGINT_MAX, **kwargs)


class PublicIdField(serializers.IntegerField):
    """An id as annotators read it (``annotation.public_ids``): the row's id in, its
    public id out. Output only: an id an annotator sends back is read by the view. With
    ``per_viewer`` (chains) the id is the reader's own, ``context["viewer"]`` (their user
    id), which the serializer must be given."""

    def __init__(self, ids: PublicIds, *, per_viewer: bool, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", f"The {ids.kind}'s public id (not its row id).")
        super().__init__(min_value=1, max_value=PUBLIC_ID_MAX, read_only=True, **kwargs)
        self.ids = ids
        self.per_viewer = per_viewer

    def to_representation(self, value: Any) -> int:
        return self.ids.show(int(value), viewer=self.context["viewer"] if self.per_viewer else None)


def RatingField(**kwargs: Any) -> serializers.IntegerField:  # noqa: N802
    """A step rating, -1 (incorrect), 0 (ambiguous) or 1 (correct), as an integer column
    holds it: the service checks the value itself, with a message naming the step."""
    return serializers.IntegerField(min_value=INT32_MIN, max_value=INT32_MAX, **kwargs)


class CursorField(serializers.RegexField):
    """A keyset page's cursor: the id the previous page ended at, as digits. Not an
    integer input: an id may pass 2**31, which no integer input of the API takes (see the
    module docstring), so the schema states a pattern and this field the bigint range."""

    PATTERN = r"^[1-9][0-9]{0,18}$"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(self.PATTERN, **kwargs)

    def to_internal_value(self, data: Any) -> int:  # type: ignore[override]  # the id
        text = super().to_internal_value(data)
        if not re.fullmatch(self.PATTERN, text) or int(text) > BIGINT_MAX:
            self.fail("invalid")
        return int(text)


def int_between(low: int, high: int) -> Callable[[str], int]:
    """An argparse ``type`` for a command's integer option, bounded like the fields above."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not between {low} and {high}")
        return value

    return parse


class PageNumberPagination(pagination.PageNumberPagination):
    """DRF's page-number pagination, its ``page`` parameter's range in the schema (a page
    past the last one is DRF's 404 "Invalid page")."""

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            if parameter["name"] == self.page_query_param:
                parameter["schema"] = {"type": "integer", "minimum": 1, "maximum": INT32_MAX}
        return parameters
