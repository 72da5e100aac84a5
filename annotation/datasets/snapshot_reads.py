"""Read paths over snapshots: listing them, finding one, and streaming a snapshot's
examples for exports and training (comparing two: ``snapshot_diff``). Access checks stay in
``annotation.access``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from django.db import connection, transaction
from django.db.models import QuerySet
from psycopg import sql

from annotation.models import Chain, Problem, Project, Snapshot, SnapshotChain, SnapshotKind, Step

try:  # orjson parses the labels/support/votes columns several times faster than json
    from orjson import loads as _json_loads
except ImportError:  # pragma: no cover - orjson is a dependency; json is the safety net
    _json_loads = json.loads

# Snapshot rows per round trip: with their steps (~10 each) a few MB, whatever the size
# of the snapshot.
EXAMPLE_CHUNK = 1_000
# Memory a bulk read may give PostgreSQL for sorting the snapshot's rows (a few hundred
# bytes each, no step text): 100,000 chains sort in memory instead of spilling to disk.
STREAM_WORK_MEM = "64MB"
# The COPY row of ``_STREAM_SQL``, column by column, for psycopg's binary loaders.
_STREAM_TYPES = (
    "int8",
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "text",
    "bool",
    "text",
    "text[]",
)


def _verdict(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def stated_verdict(meta: Any) -> bool | None:
    """The import's own verdict on a chain's final answer (ProcessBench's
    ``final_answer_correct``, kept in the chain's meta), if it gave one."""
    return _verdict(meta.get("final_answer_correct") if isinstance(meta, dict) else None)


def _source_id(value: Any) -> str | int | None:
    return value if isinstance(value, str | int) and not isinstance(value, bool) else None


def stated_id(meta: Any) -> str | int | None:
    """The id the chain's source record gave it (ProcessBench's ``id``, a generic line's
    ``id``, kept in the chain's meta), if it gave a string or an integer."""
    return _source_id(meta.get("id") if isinstance(meta, dict) else None)


@dataclass(frozen=True, slots=True)
class SnapshotExample:
    """One chain of a snapshot with everything an export or a trainer needs."""

    chain_id: int
    chain_hash: str
    split: str
    labels: list[int | None]
    support: list[float | None]
    votes: list[dict[str, Any]]  # empty unless asked for (with_votes)
    problem: str
    reference_answer: str
    final_answer: str
    generator: str
    steps: list[str]
    # The import's own verdict on the final answer (ProcessBench's final_answer_correct,
    # kept in the chain's meta) when it gave one: what the PRM reads as the answer's grade.
    answer_correct: bool | None = None
    # The source record's own id (``stated_id``), which an export writes back.
    source_id: str | int | None = None
    # The row's machine labels (``SnapshotChain.machine``), empty unless asked for
    # (with_machine) or when the snapshot includes no machine source.
    machine: dict[str, Any] = field(default_factory=dict)
    # Whether the row's labels are machine labels routing accepted (the snapshot marked
    # it: ``SnapshotChain.machine["routing"]``); read always, whatever ``with_machine``.
    machine_agreed: bool = False
    # What the voters wrote (``SnapshotChain.notes``): rewrites and comments; read always.
    notes: list[dict[str, Any]] = field(default_factory=list)


# Which snapshots ``snapshot_list`` returns: a person's (or the command line's) datasets,
# or those training runs took for themselves (``Snapshot.kind``; each kind numbers its own).
SNAPSHOT_KINDS = tuple(SnapshotKind.values)


def snapshot_list(*, project: Project, kind: str | None = None) -> QuerySet[Snapshot]:
    """The project's snapshots, newest first; of one of SNAPSHOT_KINDS when given. Newest
    by when they were taken: the two kinds number apart, so a version alone orders
    neither a list of both nor one kind against the other."""
    snapshots = (
        Snapshot.objects.filter(project=project)
        .select_related("created_by")
        .order_by("-created_at", "-pk")
    )
    if kind is not None:
        return snapshots.filter(kind=kind)
    return snapshots


def snapshot_options(*, snapshot: Snapshot) -> dict[str, Any]:
    """The options the snapshot was taken with (``snapshot_create``). A snapshot taken
    before there were options holds what they stand for: every labeled chain, any number
    of votes, a tie at the lowest rating. One taken before the label sources were a choice
    read imported labels by the project's rule: ``include_imported`` is true for it; one
    taken before machine labels read none."""
    stored = snapshot.meta.get("options") if isinstance(snapshot.meta, dict) else None
    before_options = {
        "finished_only": False,
        "include_imported": True,
        "min_support": 1,
        "ties": "lowest",
        "heldout_fraction": snapshot.heldout_fraction,
        "seed": snapshot.seed,
        "machine_sources": [],
    }
    if not isinstance(stored, dict):
        return before_options
    # In this key order (jsonb keeps its own), so a header or a page lists them alike.
    return {key: stored.get(key, value) for key, value in before_options.items()}


def training_snapshots(*, project: Project, limit: int = 5) -> list[Snapshot]:
    """The newest snapshots training runs took for themselves, newest first."""
    return list(snapshot_list(project=project, kind=SnapshotKind.TRAINING)[:limit])


def snapshot_get(
    *, project: Project, version: int | None = None, kind: str = SnapshotKind.DATASET
) -> Snapshot | None:
    """The snapshot of ``kind`` with this version, or when ``version`` is None the newest
    of that kind; None if there is no such snapshot. The kind is a dataset unless said:
    a training run's own snapshot numbers apart (t1, t2, ...) and never stands for the
    lead's dataset."""
    snapshots = snapshot_list(project=project, kind=kind)
    if version is not None:
        snapshots = snapshots.filter(version=version)
    return snapshots.first()


def snapshot_same_as(*, snapshot: Snapshot) -> Snapshot | None:
    """The newest earlier snapshot of ``snapshot``'s project and kind with its content
    hash (the same rows: a new version that adds nothing), or None."""
    return (
        Snapshot.objects.filter(
            project_id=snapshot.project_id,
            kind=snapshot.kind,
            content_hash=snapshot.content_hash,
            version__lt=snapshot.version,
        )
        .order_by("-version")
        .first()
    )


def snapshot_examples(
    *,
    snapshot: Snapshot,
    split: str | None = None,
    with_votes: bool = False,
    with_machine: bool = False,
    chunk_size: int = EXAMPLE_CHUNK,
) -> Iterator[SnapshotExample]:
    """The snapshot's chains (of one split when given) in chain order, streamed.

    Chain order (the import order) rather than the snapshot rows' own (content-hash)
    order: steps are stored by chain, so reading them in that order walks the step index
    and table front to back (see ``_STREAM_SQL``). Memory stays flat however large the
    snapshot: rows are read by keyset pagination on the (snapshot, chain) unique index,
    ``chunk_size`` at a time, each chunk in two queries (the rows with their chain and
    problem, then the chunk's steps). Plain values, not model instances: building a
    million Step objects would cost more than the export itself."""
    fields = [
        "id",
        "chain_id",
        "split",
        "labels",
        "support",
        "chain__content_hash",
        "chain__final_answer",
        "chain__generator",
        "chain__problem__text",
        "chain__problem__reference_answer",
        "chain__meta",
    ]
    # Always in the row (None when not asked for), so the columns keep their places.
    fields.append("votes" if with_votes else "id")
    # The whole machine column even when not asked for: ``machine_agreed`` reads it (a
    # key lookup would compile per database vendor; this path is the one off PostgreSQL).
    fields.append("machine")
    fields.append("notes")
    rows = SnapshotChain.objects.filter(snapshot=snapshot)
    if split is not None:
        rows = rows.filter(split=split)
    last_chain_id = 0
    while True:
        chunk = list(
            rows.filter(chain_id__gt=last_chain_id)
            .order_by("chain_id")
            .values_list(*fields)[:chunk_size]
        )
        if not chunk:
            return
        last_chain_id = chunk[-1][1]
        steps: dict[int, list[str]] = {}
        step_rows = (
            Step.objects.filter(chain_id__in=[row[1] for row in chunk])
            .order_by("chain_id", "index")
            .values_list("chain_id", "text")
        )
        for chain_id, text in step_rows:
            steps.setdefault(chain_id, []).append(text)
        for row in chunk:
            yield SnapshotExample(
                chain_id=row[1],
                chain_hash=row[5],
                split=row[2],
                labels=row[3],
                support=row[4],
                votes=row[11] if with_votes else [],
                machine=row[12] if with_machine else {},
                machine_agreed="routing" in (row[12] or {}),
                notes=row[13] or [],
                problem=row[8],
                reference_answer=row[9],
                final_answer=row[6],
                generator=row[7],
                steps=steps.get(row[1], []),
                answer_correct=stated_verdict(row[10]),
                source_id=stated_id(row[10]),
            )


# One statement for the whole snapshot, streamed by COPY. The steps come as one ordered
# text[] per chain from the (chain_id, index) unique index, so there is no second query per
# page, no per-chain sort and no Python-side grouping.
#
# The rows are sorted in the inner query, before their steps are attached: sorted after,
# every step text would go through the sort too, which spills to disk at a million steps.
# They are sorted by chain id, as ``snapshot_examples`` pages, so both paths give the same
# file byte for byte, and so the per-chain index probes into the steps go forward through
# the index and the table (chains' steps are stored in import order) instead of jumping
# about: at a million steps that cuts the query's time by a third or more. ``OFFSET 0``
# keeps the planner from flattening the inner query into the outer one. JSON columns come
# as text and are parsed here: Django's JSON loader would parse them twice over.
_STREAM_SQL = f"""
    SELECT r.*, ARRAY(
        SELECT s.text FROM {Step._meta.db_table} s WHERE s.chain_id = r.chain_id
        ORDER BY s.chain_id, s.index
    )
    FROM (
        SELECT sc.chain_id, c.content_hash, sc.split, sc.labels::text, sc.support::text,
               {{votes}}, {{machine}}, p.text, p.reference_answer, c.final_answer, c.generator,
               (c.meta -> 'final_answer_correct')::text, (c.meta -> 'id')::text,
               sc.machine -> 'routing' IS NOT NULL, NULLIF(sc.notes, '[]'::jsonb)::text
        FROM {SnapshotChain._meta.db_table} sc
        JOIN {Chain._meta.db_table} c ON c.id = sc.chain_id
        JOIN {Problem._meta.db_table} p ON p.id = c.problem_id
        WHERE sc.snapshot_id = {{snapshot}} {{split}}
        ORDER BY sc.chain_id
        OFFSET 0
    ) r
"""


def snapshot_examples_streamed(
    *,
    snapshot: Snapshot,
    split: str | None = None,
    with_votes: bool = False,
    with_machine: bool = False,
) -> Iterator[SnapshotExample]:
    """The same examples as ``snapshot_examples``, in the same order, for bulk readers
    (exports): on PostgreSQL one ``COPY (query) TO STDOUT`` in binary, decoded by
    psycopg's C loaders without the ORM; elsewhere (SQLite, the demo database) it is
    ``snapshot_examples`` itself.

    COPY rather than a server-side cursor: with a cursor the server computes a page
    only when asked and the client waits for it, then the server waits while the client
    writes it out. COPY keeps sending while the client works (TCP flow control stops it
    when the client falls behind, so memory stays flat), and the two run side by side on
    two cores: a 1,000,000-step export takes about the longer of the two, not their sum.

    The statement runs in a transaction that stays open while the caller iterates, so the
    whole export reads one consistent state (and a slow reader holds it open as long).
    Closing the iterator early (a client that disconnects) cancels the COPY and rolls that
    read-only transaction back. Don't run other queries on this connection between two
    items."""
    if connection.vendor != "postgresql":
        yield from snapshot_examples(
            snapshot=snapshot, split=split, with_votes=with_votes, with_machine=with_machine
        )
        return
    # COPY takes no bind parameters: the two values are rendered as literals by psycopg.
    statement = sql.SQL(
        _STREAM_SQL.format(
            votes="sc.votes::text" if with_votes else "NULL",
            machine="sc.machine::text" if with_machine else "NULL",
            snapshot="{snapshot}",
            split="AND sc.split = {split}" if split is not None else "",
        )
    ).format(snapshot=sql.Literal(int(snapshot.pk)), split=sql.Literal(split))
    with transaction.atomic():
        connection.ensure_connection()
        raw = connection.connection
        # The planner's cost for one index probe per chain crosses the JIT threshold on
        # large snapshots, and compiling takes longer than the probes it would speed up.
        raw.execute("SET LOCAL jit = off")
        raw.execute(sql.SQL("SET LOCAL work_mem = {}").format(sql.Literal(STREAM_WORK_MEM)))
        with (
            raw.cursor() as cursor,
            cursor.copy(sql.SQL("COPY ({}) TO STDOUT (FORMAT BINARY)").format(statement)) as copy,
        ):
            # Binary rows: the text[] of steps is decoded in C with no parsing of quotes.
            copy.set_types(_STREAM_TYPES)
            for row in copy.rows():
                yield _streamed_example(row)


def _streamed_example(row: tuple[Any, ...]) -> SnapshotExample:
    """One row of ``_STREAM_SQL``'s COPY as the example it is."""
    (
        chain_id,
        chain_hash,
        row_split,
        labels,
        support,
        votes,
        machine,
        problem,
        reference_answer,
        final_answer,
        generator,
        verdict,
        source_id,
        machine_agreed,
        notes,
        steps,
    ) = row
    loads = _json_loads
    return SnapshotExample(
        chain_id=chain_id,
        chain_hash=chain_hash,
        split=row_split,
        labels=loads(labels),
        support=loads(support),
        votes=loads(votes) if votes is not None else [],
        machine=loads(machine) if machine is not None else {},
        problem=problem,
        reference_answer=reference_answer,
        final_answer=final_answer,
        generator=generator,
        steps=steps,
        answer_correct=_verdict(loads(verdict) if verdict is not None else None),
        source_id=_source_id(loads(source_id) if source_id is not None else None),
        machine_agreed=bool(machine_agreed),
        notes=loads(notes) if notes is not None else [],
    )
