"""The tables every submit writes keep no index that another makes needless: an index
whose columns lead another index of the same table serves no lookup the longer one does
not, yet each submit writes an entry into it (ten ratings, the annotation, and the
chain's row, whose ``finished_count`` update is never HOT). Read from PostgreSQL's
catalog, so an index added by hand or by a migration counts too."""

from __future__ import annotations

import pytest
from django.db import connection

from annotation.models import Annotation, Assignment, Chain, StepRating

pytestmark = pytest.mark.django_db

HOT_TABLES = tuple(m._meta.db_table for m in (Chain, Annotation, StepRating, Assignment))

# Each index of a table: its name, whether it is unique, whether it has a WHERE, and its
# columns in order (None for an expression).
INDEXES_SQL = """
    SELECT ic.relname, i.indisunique, i.indpred IS NOT NULL, ARRAY(
        SELECT a.attname FROM unnest(i.indkey) WITH ORDINALITY AS k(attnum, n)
        LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
        ORDER BY k.n
    )
    FROM pg_index i
    JOIN pg_class ic ON ic.oid = i.indexrelid
    JOIN pg_class t ON t.oid = i.indrelid
    WHERE t.relname = %s
"""


@pytest.mark.parametrize("table", HOT_TABLES)
def test_no_index_of_a_hot_table_leads_another(table) -> None:
    with connection.cursor() as cursor:
        cursor.execute(INDEXES_SQL, [table])
        indexes = [(name, unique, partial, list(cols)) for name, unique, partial, cols in cursor]

    # A plain index (not unique, no WHERE) is needless when its columns lead another
    # index that holds every row (a unique one serves the same lookups)
    needless = [
        f"{name} {columns} leads {other} {other_columns}"
        for name, unique, partial, columns in indexes
        if not unique and not partial and None not in columns
        for other, _, other_partial, other_columns in indexes
        if other != name
        and not other_partial
        and len(other_columns) > len(columns)
        and other_columns[: len(columns)] == columns
    ]
    assert not needless, needless
