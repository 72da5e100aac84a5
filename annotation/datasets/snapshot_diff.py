"""Comparing two versions of a snapshot: how many chains were added, removed, relabeled or
moved to another split, and the chains that differ, a page at a time. One statement over
both versions' rows (plain SQL: a full outer join the ORM cannot say). Access checks stay
in ``annotation.access``."""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.db import connection
from django.db.models.functions import Left

from annotation.models import Chain, Snapshot, SnapshotChain

try:  # orjson parses the labels/support/votes columns several times faster than json
    from orjson import loads as _json_loads
except ImportError:  # pragma: no cover - orjson is a dependency; json is the safety net
    _json_loads = json.loads

# What became of a chain from snapshot A to snapshot B. A chain whose labels changed may
# have changed split too; "split_changed" is a chain with the same labels in another split.
DIFF_CHANGES = ("added", "removed", "labels_changed", "split_changed")
DIFF_PAGE_MAX = 200
# The problem text shown beside a changed chain, in characters.
DIFF_PROBLEM_CHARS = 160


@dataclass(frozen=True, slots=True)
class SnapshotDiffCounts:
    added: int
    removed: int
    labels_changed: int
    split_changed: int
    unchanged: int


@dataclass(frozen=True, slots=True)
class SnapshotDiffRow:
    """One chain that differs between A and B; ``labels_a``/``split_a`` are None for an
    added chain, ``labels_b``/``split_b`` for a removed one."""

    chain_id: int
    change: str  # one of DIFF_CHANGES
    split_a: str | None
    split_b: str | None
    labels_a: list[int | None] | None
    labels_b: list[int | None] | None
    changed_steps: list[int]  # indexes whose label differs (labels_changed)
    problem: str  # its first DIFF_PROBLEM_CHARS characters


# The rows of A and B side by side, joined on the chain: the (snapshot, chain) unique index
# gives both sides in chain order, so PostgreSQL merges them without sorting or holding
# either side in memory. Labels compare as JSON (jsonb on PostgreSQL, canonical text on
# SQLite, where Django writes both sides the same way).
_DIFF_JOIN = f"""
    FROM (SELECT chain_id, split, labels FROM {SnapshotChain._meta.db_table}
          WHERE snapshot_id = %s) a
    FULL OUTER JOIN (SELECT chain_id, split, labels FROM {SnapshotChain._meta.db_table}
          WHERE snapshot_id = %s) b ON a.chain_id = b.chain_id
"""
_DIFF_WHERE = {
    "added": "a.chain_id IS NULL",
    "removed": "b.chain_id IS NULL",
    "labels_changed": "a.chain_id IS NOT NULL AND b.chain_id IS NOT NULL AND a.labels <> b.labels",
    "split_changed": (
        "a.chain_id IS NOT NULL AND b.chain_id IS NOT NULL AND a.labels = b.labels "
        "AND a.split <> b.split"
    ),
}
_DIFF_UNCHANGED = (
    "a.chain_id IS NOT NULL AND b.chain_id IS NOT NULL AND a.labels = b.labels "
    "AND a.split = b.split"
)


def snapshot_diff_counts(*, a: Snapshot, b: Snapshot) -> SnapshotDiffCounts:
    """How many chains B adds to A, removes from it, relabels, moves to the other split
    and keeps as they were. One statement that only counts: memory stays flat for any
    size (at a million chains per side it reads both sides once)."""
    columns = ", ".join(
        f"SUM(CASE WHEN {condition} THEN 1 ELSE 0 END)"
        for condition in (*(_DIFF_WHERE[change] for change in DIFF_CHANGES), _DIFF_UNCHANGED)
    )
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {columns} {_DIFF_JOIN}", [a.pk, b.pk])
        row = cursor.fetchone()
    added, removed, labels_changed, split_changed, unchanged = (int(v or 0) for v in row)
    return SnapshotDiffCounts(
        added=added,
        removed=removed,
        labels_changed=labels_changed,
        split_changed=split_changed,
        unchanged=unchanged,
    )


def snapshot_diff_rows(
    *,
    a: Snapshot,
    b: Snapshot,
    change: str | None = None,
    after_chain: int = 0,
    limit: int = 50,
) -> list[SnapshotDiffRow]:
    """The chains that differ between A and B (of one of DIFF_CHANGES when given), in
    chain order after ``after_chain``, at most ``limit`` (keyset pagination: pass the last
    row's chain id to read on). Two queries: the page of rows, then their problems."""
    if change is not None and change not in DIFF_CHANGES:
        raise ValueError(f"change must be one of {DIFF_CHANGES}")
    differs = (
        _DIFF_WHERE[change]
        if change is not None
        else " OR ".join(f"({_DIFF_WHERE[name]})" for name in DIFF_CHANGES)
    )
    statement = (
        "SELECT COALESCE(a.chain_id, b.chain_id), a.split, b.split, "
        f"CAST(a.labels AS TEXT), CAST(b.labels AS TEXT) {_DIFF_JOIN} "
        f"WHERE ({differs}) AND COALESCE(a.chain_id, b.chain_id) > %s "
        "ORDER BY 1 LIMIT %s"
    )
    with connection.cursor() as cursor:
        cursor.execute(statement, [a.pk, b.pk, after_chain, max(1, min(limit, DIFF_PAGE_MAX))])
        found = cursor.fetchall()
    problems = dict(
        Chain.objects.filter(pk__in=[row[0] for row in found])
        .annotate(problem_start=Left("problem__text", DIFF_PROBLEM_CHARS))
        .values_list("id", "problem_start")
    )
    rows = []
    for chain_id, split_a, split_b, text_a, text_b in found:
        labels_a = _json_loads(text_a) if text_a is not None else None
        labels_b = _json_loads(text_b) if text_b is not None else None
        changed: list[int] = []
        if labels_a is None:
            kind = "added"
        elif labels_b is None:
            kind = "removed"
        elif labels_a != labels_b:
            kind = "labels_changed"
            changed = _changed_steps(labels_a, labels_b)
        else:
            kind = "split_changed"
        rows.append(
            SnapshotDiffRow(
                chain_id=chain_id,
                change=kind,
                split_a=split_a,
                split_b=split_b,
                labels_a=labels_a,
                labels_b=labels_b,
                changed_steps=changed,
                problem=problems.get(chain_id, ""),
            )
        )
    return rows


def _changed_steps(a: list[int | None], b: list[int | None]) -> list[int]:
    """The step indexes whose label differs.

    >>> _changed_steps([1, 1, None], [1, -1, 0])
    [1, 2]
    """
    size = max(len(a), len(b))
    return [
        index
        for index in range(size)
        if (a[index] if index < len(a) else None) != (b[index] if index < len(b) else None)
    ]
