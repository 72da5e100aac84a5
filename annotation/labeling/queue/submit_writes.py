"""A validated submit's writes: where its pass stands in its chain (``Standing``: a gold
pass takes a keyed place and writes what a real pass there would) and the writes
themselves, one statement on PostgreSQL (``sql.SUBMIT_WRITE_SQL``), a few on SQLite.
``submit`` decides them under the chain's lock."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection

from annotation.labeling.queue.sql import (
    CHAIN_AGREEMENT_SQL,
    CHAIN_COUNTED_AGREEMENT_SQL,
    CHAIN_COUNTED_SQL,
    CHAIN_FINISHED_HOOKS_RETURNING,
    CHAIN_FINISHED_HOOKS_SQL,
    CHAIN_SHUT_SQL,
    LEASE_SUBMITTED_SQL,
    RATINGS_INSERT,
    SUBMIT_WRITE_SQL,
)
from annotation.models import Chain, WebhookEvent
from annotation.quality.gold import gold_pass_place

# One rating's row in SQLite's INSERT: the annotation's id, then a ``Writes`` row.
_RATING_VALUES = "(%s, %s, %s, %s, %s, %s, %s)"
# SQLite takes the rows in batches, far below its limit on bound parameters (32,766).
_RATINGS_PER_STATEMENT = 1_000


@dataclass(frozen=True, slots=True)
class Standing:
    """Where a validated submit's pass stands in its chain, decided under the chain's lock:
    ``place`` (1 for the chain's first pass) of the chain's ``passes``, ``counts`` (False
    for a gold chain, whose passes are tests) and ``count`` the chain's (finished_count,
    is_finished) after it. A gold pass takes a keyed place (``quality.gold.gold_pass_place``)
    and writes what a real pass there does with the count it read: its statements, its
    cost and what it sends are a real pass's, so an annotator who times submits learns
    nothing from them."""

    place: int
    passes: int
    counts: bool
    count: tuple[int, bool]

    @property
    def finishing(self) -> bool:
        """Shaped as the pass that finishes its chain (really so when it ``counts``)."""
        return self.place >= self.passes

    @property
    def chain_open(self) -> bool:
        """Whether the chain still waits in the queue after it: not after a gold pass (it
        never counts) or the annotation that finishes it."""
        return self.counts and not self.count[1]

    @property
    def agreement_moves(self) -> bool:
        """Whether two or more passes count with it, so the chain's agreement moves."""
        return self.place >= 2


def standing_of(*, chain: Chain, user_id: int) -> Standing:
    passes = chain.project.overlap + chain.extra_labels
    if chain.is_gold:  # a test, not real work: it does not count (annotation/quality/gold.py)
        place = gold_pass_place(chain_id=chain.pk, user_id=user_id, passes=passes)
        return Standing(place, passes, False, (chain.finished_count, chain.is_finished))
    finished = chain.finished_count + 1
    return Standing(finished, passes, True, (finished, finished >= passes))


@dataclass(frozen=True, slots=True)
class Writes:
    """What a validated submit writes: the annotation's INSERT, its rating rows (step id,
    rating, comment, duration, pre-label outcome and source), the lease's close, the
    chain's count as ``standing`` says, with its agreement once two or more passes count,
    and, where ``hooks_payload`` is set (a pass shaped as the one that finishes its chain,
    in a project with an active webhook), the ``chain.finished`` outbox rows when the
    chain did finish."""

    chain_id: int
    insert_sql: str
    insert_params: list[Any]
    rows: list[tuple[int, int, str, int | None, str, str]]
    assignment_id: int
    finished_at: Any
    standing: Standing
    project_id: int
    hooks_payload: str | None


def _count_sql(writes: Writes) -> tuple[str, list[Any]]:
    """The chain's count (and agreement, and shutting its closed leases) as WITH entries
    of the submit's statement, and their parameters."""
    standing = writes.standing
    if standing.agreement_moves:
        sql = f", c AS ({CHAIN_COUNTED_AGREEMENT_SQL})"
        params = [*standing.count, writes.chain_id, writes.chain_id, writes.chain_id]
    else:
        sql, params = f", c AS ({CHAIN_COUNTED_SQL})", [*standing.count, writes.chain_id]
    if standing.finishing:
        sql += f", o AS ({CHAIN_SHUT_SQL})"
        params.append(writes.chain_id)
    return sql, params


def _write_postgresql(writes: Writes) -> tuple[int, list[int], int]:
    """Every write in one statement (``SUBMIT_WRITE_SQL``): the new annotation's id, the
    ``chain.finished`` outbox rows written and how many webhooks take that event."""
    count_sql, count_params = _count_sql(writes)
    hooks = ""
    if writes.hooks_payload is not None:
        event = WebhookEvent.CHAIN_FINISHED
        count_sql += CHAIN_FINISHED_HOOKS_SQL
        count_params += [writes.project_id, json.dumps([event]), event, writes.hooks_payload]
        count_params += [writes.finished_at, writes.finished_at, writes.standing.counts]
        hooks = CHAIN_FINISHED_HOOKS_RETURNING
    sql = SUBMIT_WRITE_SQL.format(annotation=writes.insert_sql, count=count_sql, hooks=hooks)
    columns = [list(c) for c in zip(*writes.rows, strict=True)] if writes.rows else [[]] * 6
    params = [*writes.insert_params, *columns]
    params += [writes.finished_at, writes.standing.chain_open, writes.assignment_id]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, *count_params])
        row = cursor.fetchone()
    if writes.hooks_payload is None:
        return int(row[0]), [], 0
    return int(row[0]), list(row[1]), int(row[2])


def _write_sqlite(writes: Writes) -> tuple[int, list[int], int]:
    """The same writes as a few statements (SQLite has no data-modifying CTEs); the new
    annotation's id. Its ``chain.finished`` rows are the ORM's (``_submit_new``): the
    demo's database, where no one times submits."""
    standing = writes.standing
    with connection.cursor() as cursor:
        cursor.execute(writes.insert_sql, writes.insert_params)
        (annotation_id,) = cursor.fetchone()
        for start in range(0, len(writes.rows), _RATINGS_PER_STATEMENT):
            batch = writes.rows[start : start + _RATINGS_PER_STATEMENT]
            cursor.execute(
                f"{RATINGS_INSERT} VALUES {', '.join([_RATING_VALUES] * len(batch))}",
                [value for row in batch for value in (annotation_id, *row)],
            )
        if standing.finishing:
            cursor.execute(CHAIN_SHUT_SQL, [writes.chain_id])
        cursor.execute(
            LEASE_SUBMITTED_SQL, [writes.finished_at, standing.chain_open, writes.assignment_id]
        )
        cursor.execute(CHAIN_COUNTED_SQL, [*standing.count, writes.chain_id])
        if standing.agreement_moves and standing.counts:
            cursor.execute(CHAIN_AGREEMENT_SQL, {"chain": writes.chain_id})
    return int(annotation_id), [], 0


# The submit's one writer interface: the database's own way to write ``Writes``.
_WRITERS: dict[str, Callable[[Writes], tuple[int, list[int], int]]] = {
    "postgresql": _write_postgresql
}


def submit_writes_run(writes: Writes) -> tuple[int, list[int], int]:
    """Write ``writes`` the database's way: the new annotation's id, the
    ``chain.finished`` outbox rows written and how many webhooks take that event."""
    return _WRITERS.get(connection.vendor, _write_sqlite)(writes)
