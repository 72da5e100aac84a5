"""Consensus: the one label per step that training uses, with the share of votes behind it.

Rule order for a step (the first that applies wins):

1. the chain's current adjudication by a lead, on the steps it rates, with support 1.0
   (only the newest adjudication counts: a later one supersedes the earlier, and the
   steps it leaves unrated fall through to the rules below);
2. majority vote over the chain's *current* human annotations: one vote per annotator,
   from their latest revision (an annotation that a newer one supersedes does not count);
   with ``Project.import_labels == "vote"`` each current import annotation is one more vote;
3. with ``import_labels == "fallback"`` (the default), on a chain that no person has
   labeled at all, the vote over its import annotations;
4. otherwise, and on every step nobody rated (e.g. after the first error in first_error
   mode), no label: None.

Tie rule: the lowest of the tied ratings wins (-1 before 0 before +1). A tie means the
annotators could not agree that the step is sound, and teaching a reward model that a
disputed step is correct is the costlier mistake: a PRM that rewards a flawed step steers
search toward it, while one that doubts a sound step only costs a little recall. The
support of a tie is then 1/2 (or 1/3), which lets training down-weight it.

``support`` is the share of the step's votes that went to the winning rating.

The pure part (``step_consensus``, ``chain_consensus``) takes plain lists so it is tested
without a database; ``consensus_for_chains`` loads the votes of many chains in one query.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from annotation.models import AnnotationSource, ImportLabels, StepRating

Label = int | None


@dataclass(frozen=True, slots=True)
class Vote:
    """One voter's current labels on one chain: ``labels[i]`` is their rating of step i,
    None where they did not rate it."""

    by: str
    source: str  # AnnotationSource value
    labels: tuple[Label, ...]


@dataclass(frozen=True, slots=True)
class ChainConsensus:
    labels: list[Label]
    support: list[float | None]
    votes: list[Vote] = field(default_factory=list)
    # Per step: the votes tie (no ruling): ``labels`` holds the tie rule's pick, which the
    # pages show as a tie, never as a consensus. Empty for a consensus built without it.
    tied: list[bool] = field(default_factory=list)

    @property
    def has_label(self) -> bool:
        return any(label is not None for label in self.labels)


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


def chain_consensus(
    *, step_count: int, votes: Sequence[Vote], import_labels: str = ImportLabels.FALLBACK
) -> ChainConsensus:
    """Consensus of every step of one chain from its current votes (see the module
    docstring for the rules). ``votes`` must already hold only current revisions."""
    adjudications = [vote for vote in votes if vote.source == AnnotationSource.ADJUDICATION]
    # Votes come oldest first, so the last is the current ruling.
    ruling = adjudications[-1] if adjudications else None
    human = [vote for vote in votes if vote.source == AnnotationSource.HUMAN]
    imported = [vote for vote in votes if vote.source == AnnotationSource.IMPORT]
    if import_labels == ImportLabels.VOTE:
        counted = [*human, *imported]
    elif import_labels == ImportLabels.FALLBACK and not any(
        label is not None for vote in human for label in vote.labels
    ):
        counted = imported
    else:
        counted = human
    labels: list[Label] = []
    support: list[float | None] = []
    tied: list[bool] = []
    for index in range(step_count):
        if ruling is not None and index < len(ruling.labels) and ruling.labels[index] is not None:
            labels.append(ruling.labels[index])
            support.append(1.0)
            tied.append(False)
            continue
        label, share, tie = step_tally(
            rating
            for vote in counted
            if index < len(vote.labels) and (rating := vote.labels[index]) is not None
        )
        labels.append(label)
        support.append(share)
        tied.append(tie)
    behind = [*counted, ruling] if ruling is not None else list(counted)
    return ChainConsensus(labels=labels, support=support, votes=behind, tied=tied)


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
        for _, _, by, source, ratings in sorted(voters.values(), key=lambda v: (v[0], v[1])):
            size = max(ratings) + 1 if ratings else 0
            votes.append(
                Vote(by=by, source=source, labels=tuple(ratings.get(i) for i in range(size)))
            )
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


def consensus_for_chains(
    *, chain_step_counts: Mapping[int, int], import_labels: str
) -> dict[int, ChainConsensus]:
    """Consensus of each chain given as {chain id: step count}; two queries in all
    (the votes, and nothing per chain). Chains with no votes get all-None labels."""
    votes = votes_for_chains(chain_ids=list(chain_step_counts))
    return {
        chain_id: chain_consensus(
            step_count=step_count, votes=votes.get(chain_id, []), import_labels=import_labels
        )
        for chain_id, step_count in chain_step_counts.items()
    }
