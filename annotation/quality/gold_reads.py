"""Read paths of gold chains: each annotator's score against the answer keys, and where an
annotator stands in screening. The writes (marking, the queue mix-in, screening
decisions) are in ``annotation.quality.gold``.

Scoring rules, per (annotator, gold chain), from the annotator's pass as they submitted it
(a later revision of it does not count: a gold chain measures the pass as submitted, and
a score that moved when a pass is revised would tell a gold chain from another one, see
``annotation.labeling.revisions``) against the ratings of the chain's ``gold_annotation``:

* step accuracy: over the steps that both the answer key and the annotator rated. A step
  one of them did not rate (after a first error in first_error mode, or past the end of an
  imported PRM800K label) is missing, not wrong. Pooled over chains: correct / compared.
* first-error match: the first -1 is at the same step in both, or neither has a -1.
  The share of gold chains that match.

Nothing here is ever sent to an annotator except the aggregates of
``gold_score_for_annotator`` (see ``annotation.labeling.workspace_reads``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.db.models import CharField, Exists, OuterRef, Q, Value
from django.db.models.functions import MD5, Cast, Concat

from annotation.first_error import first_error
from annotation.models import (
    Annotation,
    AnnotationSource,
    Assignment,
    AssignmentStatus,
    Chain,
    Project,
    Role,
    Screening,
    ScreeningStatus,
    StepRating,
)
from annotation.public_ids import purpose_key

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# step index -> rating
Labels = Mapping[int, int]


@dataclass(frozen=True, slots=True)
class ChainComparison:
    """One annotator's pass over one gold chain against its answer key."""

    steps_compared: int
    steps_correct: int
    first_error_match: bool


@dataclass(frozen=True, slots=True)
class GoldScore:
    """An annotator's score over the gold chains they labeled."""

    annotator_id: int
    username: str
    chains: int
    steps_compared: int
    steps_correct: int
    first_error_matches: int

    @property
    def step_accuracy(self) -> float | None:
        return self.steps_correct / self.steps_compared if self.steps_compared else None

    @property
    def first_error_match(self) -> float | None:
        return self.first_error_matches / self.chains if self.chains else None


def _stated_first_error(labels: Labels) -> int | None:
    """The first -1 among the steps rated, -1 for none (``annotation.first_error``,
    "stated": a step one side did not rate says nothing).

    >>> _stated_first_error({0: 1, 2: -1, 1: -1}), _stated_first_error({0: 1, 1: 0})
    (1, -1)
    """
    in_order = [labels.get(index) for index in range(max(labels, default=-1) + 1)]
    return first_error(in_order, reading="stated")


def compare_to_gold(*, gold: Labels, mine: Labels) -> ChainComparison:
    """Compare an annotator's ratings to the answer key of one chain.

    >>> compare_to_gold(gold={0: 1, 1: -1}, mine={0: 1, 1: 1, 2: -1})
    ChainComparison(steps_compared=2, steps_correct=1, first_error_match=False)
    >>> compare_to_gold(gold={0: 1, 1: -1, 2: 1}, mine={0: 1, 1: -1})  # step 2 is missing
    ChainComparison(steps_compared=2, steps_correct=2, first_error_match=True)
    """
    shared = gold.keys() & mine.keys()
    return ChainComparison(
        steps_compared=len(shared),
        steps_correct=sum(1 for index in shared if gold[index] == mine[index]),
        first_error_match=_stated_first_error(gold) == _stated_first_error(mine),
    )


def score(
    comparisons: Iterable[ChainComparison], *, annotator_id: int, username: str = ""
) -> GoldScore:
    """Pool the comparisons of one annotator."""
    items = list(comparisons)
    return GoldScore(
        annotator_id=annotator_id,
        username=username,
        chains=len(items),
        steps_compared=sum(item.steps_compared for item in items),
        steps_correct=sum(item.steps_correct for item in items),
        first_error_matches=sum(1 for item in items if item.first_error_match),
    )


@dataclass(frozen=True, slots=True)
class GoldPass:
    """One annotator's current annotation of one gold chain, compared to the key."""

    annotator_id: int
    chain_id: int
    created_at: datetime
    comparison: ChainComparison


def _ratings_by_annotation(annotation_ids: Iterable[int]) -> dict[int, dict[int, int]]:
    labels: dict[int, dict[int, int]] = defaultdict(dict)
    rows = StepRating.objects.filter(annotation_id__in=list(annotation_ids)).values_list(
        "annotation_id", "step__index", "rating"
    )
    for annotation_id, index, rating in rows:
        labels[annotation_id][index] = rating
    return labels


def gold_passes(
    *,
    project: Project,
    annotator_ids: Iterable[int] | None = None,
    created_since: datetime | None = None,
    created_before: datetime | None = None,
) -> list[GoldPass]:
    """Every human pass as submitted (no revision) on a gold chain of ``project``
    (optionally of some annotators, created in ``[created_since, created_before)``),
    compared to the chain's answer key, oldest first. Three queries whatever the number
    of annotators."""
    keys = dict(
        Chain.objects.filter(project=project, is_gold=True).values_list("id", "gold_annotation_id")
    )
    if not keys:
        return []
    annotations = Annotation.objects.filter(
        chain_id__in=list(keys),
        source=AnnotationSource.HUMAN,
        supersedes__isnull=True,
    )
    if annotator_ids is not None:
        annotations = annotations.filter(annotator_id__in=list(annotator_ids))
    if created_since is not None:
        annotations = annotations.filter(created_at__gte=created_since)
    if created_before is not None:
        annotations = annotations.filter(created_at__lt=created_before)
    # One pass per (annotator, chain): the newest, should there be several.
    latest: dict[tuple[int, int], tuple[int, datetime]] = {}
    for annotation_id, chain_id, annotator_id, created_at in annotations.order_by(
        "created_at", "id"
    ).values_list("id", "chain_id", "annotator_id", "created_at"):
        latest[(annotator_id, chain_id)] = (annotation_id, created_at)
    if not latest:
        return []
    labels = _ratings_by_annotation(
        [annotation_id for annotation_id, _ in latest.values()] + list(keys.values())
    )
    passes = [
        GoldPass(
            annotator_id=annotator_id,
            chain_id=chain_id,
            created_at=created_at,
            comparison=compare_to_gold(gold=labels[keys[chain_id]], mine=labels[annotation_id]),
        )
        for (annotator_id, chain_id), (annotation_id, created_at) in latest.items()
    ]
    passes.sort(key=lambda item: (item.created_at, item.chain_id))
    return passes


def gold_scores(
    *,
    project: Project,
    annotator_ids: Iterable[int] | None = None,
    created_before: datetime | None = None,
) -> list[GoldScore]:
    """Per annotator who labeled at least one gold chain of ``project``: their gold score,
    by username. For the lead's scores endpoint and dashboard."""
    by_annotator: dict[int, list[ChainComparison]] = defaultdict(list)
    for item in gold_passes(
        project=project, annotator_ids=annotator_ids, created_before=created_before
    ):
        by_annotator[item.annotator_id].append(item.comparison)
    names = dict(
        get_user_model().objects.filter(pk__in=list(by_annotator)).values_list("pk", "username")
    )
    scores = [
        score(items, annotator_id=annotator_id, username=names.get(annotator_id, ""))
        for annotator_id, items in by_annotator.items()
    ]
    return sorted(scores, key=lambda item: item.username)


def gold_score_for_annotator(
    *, project: Project, user: User, created_before: datetime | None = None
) -> GoldScore | None:
    """The caller's own gold score, or None before they labeled any gold chain."""
    found = gold_scores(project=project, annotator_ids=[user.pk], created_before=created_before)
    return found[0] if found else None


def unseen_gold_chains(*, project: Project, user: User, now: datetime) -> Q:
    """The filter of the gold chains ``user`` may still be offered: gold, not flagged, not
    submitted, skipped or annotated by the user, and not held by a live lease of theirs
    (a prefetched lease may be live beside the one being claimed)."""
    mine = Assignment.objects.filter(chain=OuterRef("pk"), annotator=user)
    return Q(
        Q(project=project, is_gold=True, is_flagged=False),
        ~Exists(
            mine.filter(
                Q(status__in=[AssignmentStatus.SUBMITTED, AssignmentStatus.SKIPPED])
                | Q(status=AssignmentStatus.ACTIVE, expires_at__gt=now)
            )
        ),
        ~Exists(
            Annotation.objects.filter(
                chain=OuterRef("pk"), annotator=user, source=AnnotationSource.HUMAN
            )
        ),
    )


def gold_order(*, project: Project, annotator: User | None = None) -> MD5:
    """A keyed shuffle of ``project``'s gold chains, as an expression to order by: the
    chain id hashed behind a secret (``annotation.public_ids.purpose_key``) and, for one
    annotator's own order, their user id. Id order served gold chains from a later
    import in a rising sequence of their own beside the real work's; an order only the
    key decides reveals nothing, and differs from one annotator to the next."""
    key = gold_order_key(project=project, annotator=annotator)
    return MD5(Concat(Value(key), Cast("id", CharField())))


def gold_order_key(*, project: Project, annotator: User | None = None) -> str:
    """What ``gold_order`` hashes before a chain's id: the secret and the shuffle's scope
    (the queue's gold query, ``labeling.queue.sql.GOLD_CANDIDATE_SQL``, hashes the same)."""
    scope = f"{project.pk}:{annotator.pk if annotator is not None else '*'}"
    return f"{purpose_key('gold-order').hex()}:{scope}:"


def unseen_gold_chain(
    *, project: Project, user: User, now: datetime, shuffle_for: User | None = None
) -> Chain | None:
    """The first gold chain that ``user`` may still be offered (see
    ``unseen_gold_chains``) in a keyed shuffle of the project's gold chains, or None: the
    project's own shuffle unless ``shuffle_for`` names an annotator, so that screening
    gives every annotator the same set; their own for the gold mixed into their work."""
    order = gold_order(project=project, annotator=shuffle_for)
    return (
        Chain.objects.filter(unseen_gold_chains(project=project, user=user, now=now))
        .order_by(order, "id")
        .first()
    )


@dataclass(frozen=True, slots=True)
class ScreeningState:
    """Where an annotator stands in a project's screening.

    ``status`` is pending, passed or failed. ``done`` counts the gold chains of the
    current attempt (at most ``required``); ``step_accuracy`` is set once decided.
    ``decide`` is True when the state was just computed to passed or failed and not yet
    stored (``annotation.quality.gold.screening_refresh`` stores it). While pending,
    ``next_chain`` is the gold chain to offer next: None when the annotator already holds
    leases on the rest of their screening chains, or when no gold chain is left
    (``waiting_for_gold``: the lead must add some)."""

    status: str
    required: int
    done: int
    pass_accuracy: float
    step_accuracy: float | None = None
    steps_compared: int = 0
    steps_correct: int = 0
    decide: bool = False
    started_at: datetime | None = None
    next_chain: Chain | None = None
    waiting_for_gold: bool = False


def screening_applies(*, project: Project, role: str | None) -> bool:
    """Screening holds back annotators only: leads and ML staff who label are trusted."""
    return bool(project.screening_chains) and role == Role.ANNOTATOR


def screening_state_get(
    *, project: Project, user: User, now: datetime, row: Screening | None = None
) -> ScreeningState:
    """Compute ``user``'s screening state in ``project`` (which has screening on).

    A stored decision (a Screening row that is passed or failed) is returned as is.
    Otherwise the annotator's first ``screening_chains`` gold passes since the attempt
    started are scored: with that many, or with fewer when the annotator has done every
    gold chain there is (and at least one), the state is decided (``decide`` True).
    Pass: a step accuracy of at least ``screening_pass_accuracy``; a screening with no
    step to compare is a fail. ``row`` saves the query when the caller has it."""
    required = project.screening_chains
    if row is None:
        row = Screening.objects.filter(project=project, annotator=user).first()
    if row is not None and row.status != ScreeningStatus.PENDING:
        return ScreeningState(
            status=row.status,
            required=required,
            done=row.chains,
            pass_accuracy=project.screening_pass_accuracy,
            step_accuracy=row.step_accuracy,
            steps_compared=row.steps_compared,
            steps_correct=row.steps_correct,
            started_at=row.started_at,
        )
    started_at = row.started_at if row is not None else None
    passes = gold_passes(project=project, annotator_ids=[user.pk], created_since=started_at)
    counted = passes[:required]
    if len(counted) < required:
        # Gold chains under the user's own live leases (a prefetch may hold two) are not
        # done yet, and no more are handed out than the screening needs.
        leased = Assignment.objects.filter(
            project=project,
            annotator=user,
            status=AssignmentStatus.ACTIVE,
            expires_at__gt=now,
            chain__is_gold=True,
        ).count()
        next_chain = None
        if len(counted) + leased < required:
            next_chain = unseen_gold_chain(project=project, user=user, now=now)
        if next_chain is not None or leased or not counted:
            return ScreeningState(
                status=ScreeningStatus.PENDING,
                required=required,
                done=len(counted),
                pass_accuracy=project.screening_pass_accuracy,
                started_at=started_at,
                next_chain=next_chain,
                waiting_for_gold=next_chain is None and not leased,
            )
        # Every gold chain there is was done: score what there is.
    result = score((item.comparison for item in counted), annotator_id=user.pk)
    accuracy = result.step_accuracy
    passed = accuracy is not None and accuracy >= project.screening_pass_accuracy
    return ScreeningState(
        status=ScreeningStatus.PASSED if passed else ScreeningStatus.FAILED,
        required=required,
        done=len(counted),
        pass_accuracy=project.screening_pass_accuracy,
        step_accuracy=accuracy,
        steps_compared=result.steps_compared,
        steps_correct=result.steps_correct,
        decide=True,
        started_at=started_at,
    )


def screening_list(*, project: Project) -> dict[int, Screening]:
    """The stored screening rows of a project by annotator id."""
    return {row.annotator_id: row for row in Screening.objects.filter(project=project)}
