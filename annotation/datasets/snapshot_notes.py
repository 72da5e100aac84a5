"""What people wrote beside their votes, kept in a snapshot row (``SnapshotChain.notes``)
so that every export carries it: each current vote's rewrite (an annotator's corrected
text of the step they marked as the first wrong one) and its step comments, each with the
voter and their rating of that step.

The votes are the row's consensus votes (``quality.votes``): one pass per voter, so a
revised pass's texts replace the older pass's, as its labels do. An entry is
``{"step", "by", "source", "rating", "rewrite"?, "comment"?}``; ``step`` is the index of
the step the text was written for, null for a rewrite of a pass that marked no step
wrong (kept, never dropped). Entries are in step order, then in the votes' order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from annotation.models import Annotation, StepRating
from annotation.quality.votes import Vote

# Passes per query: well below a database's bound on one statement's parameters.
BATCH = 5_000


def _batches(ids: list[int]) -> Iterator[list[int]]:
    for start in range(0, len(ids), BATCH):
        yield ids[start : start + BATCH]


def _texts(ids: list[int]) -> tuple[dict[int, str], dict[int, dict[int, str]]]:
    """The rewrites of these passes and their comments by step index, where written."""
    rewrites: dict[int, str] = {}
    comments: dict[int, dict[int, str]] = {}
    for batch in _batches(ids):
        rewrites.update(
            Annotation.objects.filter(pk__in=batch).exclude(rewrite="").values_list("pk", "rewrite")
        )
        rows = (
            StepRating.objects.filter(annotation_id__in=batch)
            .exclude(comment="")
            .values_list("annotation_id", "step__index", "comment")
        )
        for annotation, index, comment in rows:
            comments.setdefault(annotation, {})[index] = comment
    return rewrites, comments


def _vote_notes(
    vote: Vote, rewrite: str | None, comments: Mapping[int, str]
) -> list[dict[str, Any]]:
    """One vote's entries: a comment on a step, and its rewrite on its first wrong step."""
    wrong = next((i for i, label in enumerate(vote.labels) if label == -1), None)
    texts: dict[int | None, dict[str, str]] = {
        index: {"comment": c} for index, c in comments.items()
    }
    if rewrite:
        texts.setdefault(wrong, {})["rewrite"] = rewrite
    out = []
    for step, written in texts.items():
        rating = vote.labels[step] if step is not None and step < len(vote.labels) else None
        out.append(
            {"step": step, "by": vote.by, "source": vote.source, "rating": rating, **written}
        )
    return out


def chain_notes(*, votes: Mapping[int, Sequence[Vote]]) -> dict[int, list[dict[str, Any]]]:
    """Each chain's notes from its current votes (``{chain id: votes}``), two queries per
    ``BATCH`` passes; chains whose voters wrote nothing are absent."""
    ids = [vote.annotation for chain in votes.values() for vote in chain if vote.annotation]
    rewrites, comments = _texts(ids)
    out: dict[int, list[dict[str, Any]]] = {}
    for chain_id, chain_votes in votes.items():
        notes = [
            note
            for vote in chain_votes
            if vote.annotation in rewrites or vote.annotation in comments
            for note in _vote_notes(
                vote, rewrites.get(vote.annotation or 0), comments.get(vote.annotation or 0, {})
            )
        ]
        if notes:
            # Stable: a step's entries keep the votes' order; a step-less rewrite last.
            notes.sort(key=lambda note: (note["step"] is None, note["step"] or 0))
            out[chain_id] = notes
    return out
