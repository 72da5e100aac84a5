"""Model instances from plain SQL rows, for the labeling queue's hot paths.

``Model.objects.raw()`` works out, on every call, which columns came back, in what
order, and which converters each needs; on ``next`` and ``submit`` that bookkeeping cost
more than the queries. Here the column list is spelled out once per model (so ``SELECT``
order never depends on the table's physical column order, which migrations may have
changed) and the converters are looked up once per model and database vendor.
On PostgreSQL psycopg already hands back the Python types the ORM would, so most fields
need no converter; SQLite (the embedded default) hands back datetimes and booleans raw,
and they are converted as the ORM would convert them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import connection
from django.db.models import Model

M = TypeVar("M", bound=Model)


@functools.cache
def select_columns(model: type[Model], alias: str) -> str:
    """The model's concrete columns as ``alias."column"``, in field order, for a SELECT
    whose rows ``model_from_row`` reads."""
    return ", ".join(f'{alias}."{field.column}"' for field in model._meta.concrete_fields)


@functools.cache
def _converters(model: type[Model], vendor: str) -> tuple[tuple[int, Callable, Any], ...]:
    """(position, converter, column) for every field that needs one on ``vendor``."""
    found = []
    for position, field in enumerate(model._meta.concrete_fields):
        column = field.get_col(model._meta.db_table)
        # Field.get_db_converters is Django's, missing from django-stubs.
        converters = field.get_db_converters(connection)  # type: ignore[attr-defined]
        for convert in connection.ops.get_db_converters(column) + converters:
            found.append((position, convert, column))
    return tuple(found)


@functools.cache
def _attnames(model: type[Model]) -> tuple[str, ...]:
    return tuple(field.attname for field in model._meta.concrete_fields)


def model_width(model: type[Model]) -> int:
    """How many columns ``select_columns(model, ...)`` selects."""
    return len(_attnames(model))


def model_from_row(model: type[M], values: Sequence[Any]) -> M:
    """An instance of ``model`` from the values of ``select_columns(model, ...)``,
    converted as the ORM would, marked as loaded from the database (``save()`` updates)."""
    converters = _converters(model, connection.vendor)
    if converters:
        values = list(values)
        for position, convert, column in converters:
            values[position] = convert(values[position], column, connection)
    return model.from_db(connection.alias, _attnames(model), values)


def fetch_models(model: type[M], sql: str, params: Any) -> list[M]:
    """Run ``sql``, which selects ``select_columns(model, ...)``, and return the rows as
    instances of ``model``."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return [model_from_row(model, row) for row in rows]
