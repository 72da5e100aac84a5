"""Read paths of review: which chains annotators disagree on, and every label of a chain
side by side with its full history."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from django.contrib.auth import get_user_model
from django.db.models import F, QuerySet

from annotation.models import (
    Annotation,
    AnnotationSource,
    Chain,
    ConsensusMethod,
    ImportLabels,
    Project,
    Step,
    StepRating,
)
from annotation.quality.agreement import CurrentRatings, current_human_ratings
from annotation.quality.consensus import chain_consensus
from annotation.quality.consensus_fit import (
    StepPosterior,
    dawid_skene_fit,
    dawid_skene_fit_current,
)
from annotation.quality.votes import counted_votes, votes_for_chains
from annotation.routing.machine_labels import (
    MachineColumn,
    chain_machine_labels,
    with_consensus,
)


@dataclass(frozen=True, slots=True)
class ChainDisagreement:
    chain_id: int
    problem: str
    step_count: int
    annotators: int
    disagreeing_steps: int
    # Sum over disagreeing steps of (highest - lowest rating): a -1 vs +1 clash weighs 2.
    spread: int
    # Resolved: a lead's current ruling rates every disagreeing step.
    adjudicated: bool
    # Usernames of the annotators with a current pass, sorted.
    by: tuple[str, ...] = ()
    # Disagreeing steps the current ruling rates (all of them once resolved).
    ruled_steps: int = 0

    @property
    def agreement(self) -> float:
        """Share of the chain's steps on which nobody disagrees."""
        return 1.0 - self.disagreeing_steps / max(1, self.step_count)


def _voter_names(data: CurrentRatings, chains: np.ndarray) -> dict[int, list[str]]:
    """The distinct annotators of each of ``chains`` in the ratings ``data``, by name."""
    pairs = np.unique(np.stack([data.chain, data.annotator], axis=1), axis=0)
    pairs = pairs[np.isin(pairs[:, 0], chains)]
    names = dict(
        get_user_model()
        .objects.filter(pk__in=np.unique(pairs[:, 1]).tolist())
        .values_list("pk", "username")
    )
    voters: dict[int, list[str]] = {}
    for chain_id, user_id in pairs.tolist():
        voters.setdefault(chain_id, []).append(names.get(user_id, ""))
    return voters


def chain_disagreements(
    *,
    project: Project,
    annotator: str = "",
    max_agreement: float = 1.0,
    include_resolved: bool = False,
) -> list[ChainDisagreement]:
    """Chains whose current human annotations disagree on at least one step, worst first:
    most disagreeing steps, then the widest spread, then the oldest chain. ``annotator``
    (a username): only chains that annotator labeled; ``max_agreement``: only chains whose
    share of steps without disagreement (``ChainDisagreement.agreement``) is at most that.

    A step counts as disagreeing when two or more annotators rated it and not alike. A
    step only one annotator rated (e.g. after another's first error in first_error mode)
    is not a disagreement: it was simply not asked of the other. A chain whose current
    ruling rates every disagreeing step is resolved and leaves the list (the review count
    falls); a ruling that leaves one out resolves nothing (``ruled_steps`` says how far it
    got). ``include_resolved`` lists resolved chains too, marked ``adjudicated``, so a lead
    can revisit a ruling. Four queries: the ratings, the annotators' names, the chains and
    the steps their current rulings rate."""
    data = current_human_ratings(project=project)
    if not len(data):
        return []
    steps, step_pos = np.unique(data.step, return_inverse=True)
    step_pos = step_pos.reshape(-1)
    low = np.full(steps.size, 2, dtype=np.int64)
    high = np.full(steps.size, -2, dtype=np.int64)
    np.minimum.at(low, step_pos, data.rating)
    np.maximum.at(high, step_pos, data.rating)
    step_chain = np.zeros(steps.size, dtype=np.int64)
    step_chain[step_pos] = data.chain
    disagreeing = high > low
    if not disagreeing.any():
        return []
    chains, chain_pos = np.unique(step_chain[disagreeing], return_inverse=True)
    counts = np.bincount(chain_pos.reshape(-1), minlength=chains.size)
    spreads = np.bincount(
        chain_pos.reshape(-1), weights=(high - low)[disagreeing], minlength=chains.size
    )
    voters = _voter_names(data, chains)
    info = {
        row[0]: row[1:]
        for row in Chain.objects.filter(pk__in=chains.tolist()).values_list(
            "id", "problem__text", "step_count"
        )
    }
    ruled = _ruled_disputes(
        chains=chains, disputed_steps=steps[disagreeing], disputed_chains=step_chain[disagreeing]
    )
    rows = [
        ChainDisagreement(
            chain_id=chain_id,
            problem=info[chain_id][0],
            step_count=info[chain_id][1],
            annotators=len(voters[chain_id]),
            disagreeing_steps=int(count),
            spread=int(spread),
            adjudicated=ruled.get(chain_id, 0) == count,
            by=tuple(sorted(voters[chain_id])),
            ruled_steps=ruled.get(chain_id, 0),
        )
        for chain_id, count, spread in zip(
            chains.tolist(), counts.tolist(), spreads.tolist(), strict=True
        )
        if chain_id in info
    ]
    rows = [
        row
        for row in rows
        if (not annotator or annotator in row.by)
        and row.agreement <= max_agreement + 1e-9
        and (include_resolved or not row.adjudicated)
    ]
    rows.sort(key=lambda row: (-row.disagreeing_steps, -row.spread, row.chain_id))
    return rows


def _ruled_disputes(
    *, chains: np.ndarray, disputed_steps: np.ndarray, disputed_chains: np.ndarray
) -> dict[int, int]:
    """How many of each chain's disagreeing steps (``disputed_steps``, of the chains
    ``disputed_chains`` alike) its current ruling rates, for the chains that have one."""
    ruled_steps = StepRating.objects.filter(
        annotation__chain_id__in=chains.tolist(),
        annotation__source=AnnotationSource.ADJUDICATION,
        annotation__superseded_by__isnull=True,
        rating__isnull=False,
    ).values_list("step_id", flat=True)
    covered = np.isin(disputed_steps, np.fromiter(ruled_steps, dtype=np.int64))
    found, tally = np.unique(disputed_chains[covered], return_counts=True)
    return dict(zip(found.tolist(), tally.tolist(), strict=True))


@dataclass(frozen=True, slots=True)
class LabelRevision:
    """One annotation of a chain, current or not, with its ratings by step index."""

    annotation_id: int
    source: str
    by: str
    annotator_id: int | None
    created_at: datetime
    supersedes_id: int | None
    superseded_by_id: int | None
    current: bool
    note: str
    rewrite: str
    ratings: dict[int, int] = field(default_factory=dict)
    comments: dict[int, str] = field(default_factory=dict)


def chain_label_history(*, chain: Chain) -> list[LabelRevision]:
    """Every revision of every label on the chain, oldest first: annotators' passes and
    their corrections, imported labels and adjudications, each with who and when.

    ``current`` marks the revisions consensus counts (the same rule as
    ``votes.current_votes``): nothing supersedes it, and it is the newest pass of its
    annotator (or the newest adjudication of the chain). Two queries."""
    annotations = list(
        Annotation.objects.filter(chain=chain)
        .select_related("annotator", "superseded_by")
        .order_by("created_at", "id")
    )
    ratings: dict[int, dict[int, int]] = {}
    comments: dict[int, dict[int, str]] = {}
    for annotation_id, index, rating, comment in (
        StepRating.objects.filter(annotation__chain=chain)
        .order_by("annotation_id", "step__index")
        .values_list("annotation_id", "step__index", "rating", "comment")
    ):
        ratings.setdefault(annotation_id, {})[index] = rating
        if comment:
            comments.setdefault(annotation_id, {})[index] = comment
    newest: dict[object, int] = {}
    for annotation in annotations:  # oldest first: the last one seen per key is newest
        if _superseded_by_id(annotation) is not None:
            continue
        if annotation.source == AnnotationSource.HUMAN:
            newest[("human", annotation.annotator_id)] = annotation.pk
        elif annotation.source == AnnotationSource.ADJUDICATION:
            newest[("adjudication",)] = annotation.pk
        else:
            newest[("import", annotation.pk)] = annotation.pk
    current = set(newest.values())
    return [
        LabelRevision(
            annotation_id=annotation.pk,
            source=annotation.source,
            by=_voter_name(annotation),
            annotator_id=annotation.annotator_id,
            created_at=annotation.created_at,
            supersedes_id=annotation.supersedes_id,
            superseded_by_id=_superseded_by_id(annotation),
            current=annotation.pk in current,
            note=annotation.note,
            rewrite=annotation.rewrite,
            ratings=ratings.get(annotation.pk, {}),
            comments=comments.get(annotation.pk, {}),
        )
        for annotation in annotations
    ]


def _superseded_by_id(annotation: Annotation) -> int | None:
    try:
        return annotation.superseded_by.pk
    except Annotation.DoesNotExist:
        return None


def _voter_name(annotation: Annotation) -> str:
    """The name consensus and snapshots give this voter."""
    if annotation.source == AnnotationSource.IMPORT:
        return f"import:{annotation.source_name}" if annotation.source_name else "import"
    username = annotation.annotator.get_username() if annotation.annotator else ""
    if annotation.source == AnnotationSource.ADJUDICATION:
        return f"adjudication:{username}"
    return username


@dataclass(frozen=True, slots=True)
class StepLabels:
    step_id: int
    index: int
    text: str
    # One entry per current revision, in ``ChainLabels.columns`` order; None = not rated.
    ratings: list[int | None]
    # The label training uses, by the project's method (an adjudication wins).
    consensus: int | None
    support: float | None
    tied: bool = False
    # Both methods over the counted votes alone (no adjudication), side by side.
    majority: int | None = None
    majority_support: float | None = None
    majority_tied: bool = False
    dawid_skene: StepPosterior | None = None


@dataclass(frozen=True, slots=True)
class ChainLabels:
    chain: Chain
    columns: list[LabelRevision]
    steps: list[StepLabels]
    history: list[LabelRevision]
    # The project's method (ConsensusMethod value): which of the two ``consensus`` follows.
    method: str = ConsensusMethod.MAJORITY
    # Dawid-Skene's estimated accuracy of this chain's voters, by ``LabelRevision.by``.
    reliability: dict[str, float] = field(default_factory=dict)
    # The machine sources' labels, beside the votes and never among them.
    machine: list[MachineColumn] = field(default_factory=list)


def chain_labels(*, chain: Chain) -> ChainLabels:
    """Every current label of the chain side by side per step, its consensus, majority
    vote's and Dawid-Skene's labels, the whole history, and beside them the machine
    sources' labels (never counted). Five queries (steps, annotations, ratings, the
    consensus votes and the machine labels) and Dawid-Skene's fit of the project
    (two queries when current, see ``dawid_skene_fit``; a majority-vote project only
    reads a current stored fit, never fits)."""
    history = chain_label_history(chain=chain)
    columns = [revision for revision in history if revision.current]
    steps = list(
        Step.objects.filter(chain=chain).order_by("index").values_list("id", "index", "text")
    )
    project = chain.project
    votes = votes_for_chains(chain_ids=[chain.pk]).get(chain.pk, [])
    counted = counted_votes(votes=votes, import_labels=project.import_labels)
    # Only the counted votes: the side-by-side columns compare the methods, not the ruling.
    majority = chain_consensus(
        step_count=len(steps), votes=counted, import_labels=ImportLabels.VOTE
    )
    method = project.consensus
    # A majority-vote project is never fitted for this comparison: it shows the stored
    # fit while it is current (made when the project counted by Dawid-Skene), else none.
    fit = None
    if counted:
        fit = (
            dawid_skene_fit(project=project)
            if method == ConsensusMethod.DAWID_SKENE
            else dawid_skene_fit_current(project=project)
        )
    learned = fit.chain(chain_id=chain.pk) if fit is not None else []
    learned += [None] * (len(steps) - len(learned))
    consensus = chain_consensus(
        step_count=len(steps),
        votes=votes,
        import_labels=project.import_labels,
        learned=learned if method == ConsensusMethod.DAWID_SKENE else None,
    )
    voters = {column.by for column in columns}
    machine = with_consensus(
        columns=chain_machine_labels(chain_id=chain.pk, step_count=len(steps)),
        consensus=list(consensus.labels),
        tied=list(consensus.tied),
    )
    return ChainLabels(
        chain=chain,
        columns=columns,
        steps=[
            StepLabels(
                step_id=step_id,
                index=index,
                text=text,
                ratings=[column.ratings.get(index) for column in columns],
                consensus=consensus.labels[position],
                support=consensus.support[position],
                tied=consensus.tied[position],
                majority=majority.labels[position],
                majority_support=majority.support[position],
                majority_tied=majority.tied[position],
                dawid_skene=learned[position],
            )
            for position, (step_id, index, text) in enumerate(steps)
        ],
        history=history,
        method=method,
        reliability={
            name: share
            for name, share in (fit.reliability if fit else {}).items()
            if name in voters
        },
        machine=machine,
    )


def chain_flags(*, project: Project) -> QuerySet[Chain]:
    """The project's chains flagged as broken right now, newest flag first, with who
    flagged each (and who cleared an earlier flag) loaded: one query per page."""
    return (
        Chain.objects.filter(project=project, is_flagged=True)
        .select_related("flagged_by", "flag_cleared_by")
        .order_by(F("flagged_at").desc(nulls_last=True), "-id")
    )
