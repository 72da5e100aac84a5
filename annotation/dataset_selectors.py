"""Read paths over snapshots: listing them, finding one, and streaming its examples for
exports and training. Access checks stay in ``annotation.selectors``."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from annotation.models import Project, Snapshot, SnapshotChain, Step

# Snapshot rows per round trip: with their steps (~10 each) a few MB, whatever the size
# of the snapshot.
EXAMPLE_CHUNK = 1_000


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


def snapshot_list(*, project: Project) -> QuerySet[Snapshot]:
    """The project's snapshots, newest first."""
    return (
        Snapshot.objects.filter(project=project)
        .select_related("created_by")
        .order_by("-version")
    )


def snapshot_get(*, project: Project, version: int | None = None) -> Snapshot | None:
    """The snapshot with this version, or the newest when ``version`` is None; None if
    there is no such snapshot."""
    snapshots = snapshot_list(project=project)
    if version is not None:
        snapshots = snapshots.filter(version=version)
    return snapshots.first()


def snapshot_examples(
    *,
    snapshot: Snapshot,
    split: str | None = None,
    with_votes: bool = False,
    chunk_size: int = EXAMPLE_CHUNK,
) -> Iterator[SnapshotExample]:
    """The snapshot's chains (of one split when given) in a fixed order, streamed.

    Memory stays flat however large the snapshot: rows are read by keyset pagination,
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
    ]
    if with_votes:
        fields.append("votes")
    rows = SnapshotChain.objects.filter(snapshot=snapshot)
    if split is not None:
        rows = rows.filter(split=split)
    last_id = 0
    while True:
        chunk = list(rows.filter(id__gt=last_id).order_by("id").values_list(*fields)[:chunk_size])
        if not chunk:
            return
        last_id = chunk[-1][0]
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
                votes=row[10] if with_votes else [],
                problem=row[8],
                reference_answer=row[9],
                final_answer=row[6],
                generator=row[7],
                steps=steps.get(row[1], []),
            )
