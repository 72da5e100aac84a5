"""Votes: who rated which step of a chain, as the consensus rules count them.

A vote is one voter's current labels on one chain (``Vote``): a person's newest pass, a
lead's newest ruling, or one import's labels (``current_votes``, loaded for many chains
in one query by ``votes_for_chains``). ``counted_votes`` picks the votes rules 2 and 3
of ``annotation.quality.consensus`` count, and ``step_tally`` is the majority vote over
one step with its tie rule (the lowest of the tied ratings wins).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from annotation.models import AnnotationSource, ImportLabels, StepRating

Label = int | None


@dataclass(frozen=True, slots=True)
class Vote:
    """One voter's current labels on one chain: ``labels[i]`` is their rating of step i,
    None where they did not rate it. ``annotation`` is the pass the labels come from (its
    rewrite and comments are that pass's: ``datasets.snapshot_notes``)."""

    by: str
    source: str  # AnnotationSource value
    labels: tuple[Label, ...]
    annotation: int | None = None


def step_consensus(ratings: Iterable[int]) -> tuple[Label, float | None]:
    """The winning rating of one step and its support; (None, None) without votes.

    >>> step_consensus([1, 1, -1])
    (1, 0.6666666666666666)
    >>> step_consensus([1, -1])  # a tie goes to the lowest rating
    (-1, 0.5)
    >>> step_consensus([])
    (None, None)
    """
    winner, share, _ = step_tally(ratings)
    return winner, share


def step_tally(ratings: Iterable[int]) -> tuple[Label, float | None, bool]:
    """``step_consensus`` and whether the top count is shared (a tie).

    >>> step_tally([1, -1, 0])
    (-1, 0.3333333333333333, True)
    >>> step_tally([1, 1, -1])
    (1, 0.6666666666666666, False)
    """
    counts = Counter(ratings)
    total = sum(counts.values())
    if not total:
        return None, None, False
    top = max(counts.values())
    tied = [rating for rating, count in counts.items() if count == top]
    return min(tied), top / total, len(tied) > 1


def counted_votes(*, votes: Sequence[Vote], import_labels: str) -> list[Vote]:
    """The votes rules 2 and 3 count on one chain: its human votes, plus its import votes
    with ``import_labels == "vote"``, or only its import votes with "fallback" on a chain
    no person rated."""
    human = [vote for vote in votes if vote.source == AnnotationSource.HUMAN]
    imported = [vote for vote in votes if vote.source == AnnotationSource.IMPORT]
    if import_labels == ImportLabels.VOTE:
        return [*human, *imported]
    if import_labels == ImportLabels.FALLBACK and not any(
        label is not None for vote in human for label in vote.labels
    ):
        return imported
    return human


def current_votes(
    *, rows: Iterable[tuple[int, int, str, str, int | None, str, datetime, int, int]]
) -> dict[int, list[Vote]]:
    """Group rating rows into current votes per chain.

    Each row is (chain id, annotation id, source, source name, annotator id, annotator
    username, created_at, step index, rating) of an annotation that nothing supersedes.
    Per human annotator only the newest such annotation counts: revisions are linked by
    ``supersedes``, but two unlinked passes by one person (a re-queue) must not count
    twice either. Every import annotation counts (each is a separate source file). Per
    chain only the newest adjudication counts, whoever the lead."""
    # chain id -> voter key -> (created_at, annotation id, by, source, {index: rating})
    latest: dict[int, dict[object, tuple[datetime, int, str, str, dict[int, int]]]] = {}
    for (
        chain_id,
        annotation_id,
        source,
        source_name,
        user_id,
        username,
        created,
        index,
        rating,
    ) in rows:
        voters = latest.setdefault(chain_id, {})
        if source == AnnotationSource.HUMAN:
            key: object = ("human", user_id)
            by = username
        elif source == AnnotationSource.ADJUDICATION:
            key = ("adjudication",)
            # Its own name: the lead may also have voted as an annotator on this chain.
            by = f"adjudication:{username}"
        else:
            key = ("import", annotation_id)
            by = f"import:{source_name}" if source_name else "import"
        held = voters.get(key)
        if held is None or (created, annotation_id) > (held[0], held[1]):
            # The first row of a newer pass replaces whatever older pass was held.
            held = (created, annotation_id, by, source, {})
            voters[key] = held
        if held[1] == annotation_id:  # rows of an older pass are ignored
            held[4][index] = rating
    result: dict[int, list[Vote]] = {}
    for chain_id, voters in latest.items():
        votes = []
        for _, annotation, by, source, ratings in sorted(
            voters.values(), key=lambda v: (v[0], v[1])
        ):
            size = max(ratings) + 1 if ratings else 0
            labels = tuple(ratings.get(i) for i in range(size))
            votes.append(Vote(by=by, source=source, labels=labels, annotation=annotation))
        result[chain_id] = votes
    return result


def votes_for_chains(*, chain_ids: Sequence[int]) -> dict[int, list[Vote]]:
    """The current votes of these chains, in one query. Chains without any are absent."""
    if not chain_ids:
        return {}
    rows = (
        StepRating.objects.filter(
            annotation__chain_id__in=chain_ids, annotation__superseded_by__isnull=True
        )
        .order_by()
        .values_list(
            "annotation__chain_id",
            "annotation_id",
            "annotation__source",
            "annotation__source_name",
            "annotation__annotator_id",
            "annotation__annotator__username",
            "annotation__created_at",
            "step__index",
            "rating",
        )
    )
    return current_votes(rows=rows.iterator(chunk_size=5000))
