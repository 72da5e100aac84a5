"""What machine pre-labels do to people (issue 23, verification), for the lead's dashboard:
chains labeled with the verdicts shown against chains held out from them
(``annotation.labeling.queue.prelabels``), on three figures, each with a 95 % interval:

* how often a rating agrees with the machine's verdict: with pre-labels, the share of
  shown verdicts confirmed (the acceptance rate); held out, the share of ratings that
  match the verdict the lease kept unseen. The gap between the two is the anchoring;
* seconds per chain (the pass's recorded duration);
* step accuracy on gold chains (against their answer keys).

Only passes whose lease had verdicts to show from the project's source now count
(``Assignment.prelabels`` set): a chain the source never judged is in neither arm, so the
arms differ only by the keyed draw, and passes leased under another source are left out.
Passes as submitted (no revision). Proportions over steps take Wilson's interval (steps
of one chain are not independent, so it is narrower than the truth when chains are
long); seconds a Student t interval on the mean."""

from __future__ import annotations

import math
from dataclasses import dataclass

from django.db.models import Avg, Count, Q, StdDev

from annotation.models import (
    Annotation,
    AnnotationSource,
    AssignmentStatus,
    PrelabelOutcome,
    Project,
    StepRating,
)
from annotation.quality.gold_reads import compare_to_gold

CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class Proportion:
    """``hits`` of ``total``, with Wilson's 95 % interval; all None when ``total`` is 0."""

    hits: int
    total: int
    rate: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True, slots=True)
class MeanSeconds:
    """Mean seconds over ``n`` values with a Student t 95 % interval (None below two)."""

    n: int
    mean: float | None
    low: float | None
    high: float | None


@dataclass(frozen=True, slots=True)
class Arm:
    """One side of the comparison: passes with the verdicts shown, or held out."""

    chains: int
    agreement: Proportion
    seconds: MeanSeconds
    gold_accuracy: Proportion


@dataclass(frozen=True, slots=True)
class PrelabelEffect:
    source: str
    holdout: float
    shown: Arm
    held_out: Arm


def wilson(hits: int, total: int) -> Proportion:
    """``hits`` of ``total`` with Wilson's score interval (scipy's), which stays inside
    [0, 1] and keeps its width near 0 and 1 where the normal interval collapses.

    >>> p = wilson(8, 10)
    >>> (p.rate, round(p.low, 3), round(p.high, 3))
    (0.8, 0.49, 0.943)
    >>> wilson(0, 0).rate is None
    True
    """
    if total == 0:
        return Proportion(hits=0, total=0, rate=None, low=None, high=None)
    from scipy.stats import binomtest  # scipy is heavy: only this read pays for it

    interval = binomtest(hits, total).proportion_ci(confidence_level=CONFIDENCE, method="wilson")
    return Proportion(
        hits=hits,
        total=total,
        rate=hits / total,
        low=float(interval.low),
        high=float(interval.high),
    )


def mean_interval(*, n: int, mean: float | None, sd: float | None) -> MeanSeconds:
    """The mean of ``n`` values with sample standard deviation ``sd``, and its Student t
    interval, cut at 0 (seconds are never negative; a few long chains can stretch the
    interval past it).

    >>> m = mean_interval(n=4, mean=10.0, sd=2.0)
    >>> (round(m.low, 2), round(m.high, 2))
    (6.82, 13.18)
    """
    if n < 2 or mean is None or sd is None:
        return MeanSeconds(n=n, mean=mean, low=None, high=None)
    from scipy.stats import t

    half = float(t.ppf((1 + CONFIDENCE) / 2, n - 1)) * sd / math.sqrt(n)
    return MeanSeconds(n=n, mean=mean, low=max(0.0, mean - half), high=mean + half)


def _passes(project: Project, *, shown: bool | None) -> Q:
    """Human passes as submitted in ``project`` whose lease had verdicts to show from
    the project's source: shown, held out, or (None) either."""
    passes = Q(
        chain__project=project,
        source=AnnotationSource.HUMAN,
        supersedes__isnull=True,
        assignment__status=AssignmentStatus.SUBMITTED,
        assignment__prelabels__isnull=False,
        assignment__prelabel_source=project.prelabel_source,
    )
    return passes if shown is None else passes & Q(assignment__prelabels_shown=shown)


def _seconds(passes: Q) -> MeanSeconds:
    row = Annotation.objects.filter(passes, duration_ms__isnull=False).aggregate(
        n=Count("id"), mean=Avg("duration_ms"), sd=StdDev("duration_ms", sample=True)
    )
    mean, sd = row["mean"], row["sd"]
    return mean_interval(
        n=row["n"],
        mean=None if mean is None else float(mean) / 1000,
        sd=None if sd is None else float(sd) / 1000,
    )


def _shown_agreement(passes: Q) -> Proportion:
    """Shown verdicts confirmed, of those rated (one aggregate in the database)."""
    row = StepRating.objects.filter(
        annotation__in=Annotation.objects.filter(passes).values("id")
    ).aggregate(
        confirmed=Count("id", filter=Q(prelabel=PrelabelOutcome.CONFIRMED)),
        rated=Count("id", filter=~Q(prelabel=PrelabelOutcome.NONE)),
    )
    return wilson(row["confirmed"], row["rated"])


def _held_out_agreement(passes: Q) -> Proportion:
    """Ratings that match the verdict their lease kept unseen, of the steps it had one
    for. Read row by row: the verdicts are in the lease's JSON, and held-out passes are
    a small share of the work (the project's holdout)."""
    verdicts = dict(Annotation.objects.filter(passes).values_list("id", "assignment__prelabels"))
    hits = total = 0
    rows = StepRating.objects.filter(annotation_id__in=list(verdicts)).values_list(
        "annotation_id", "step__index", "rating"
    )
    for annotation_id, index, rating in rows.iterator():
        verdict = (verdicts[annotation_id] or {}).get(str(index))
        if verdict is not None:
            total += 1
            hits += int(verdict == rating)
    return wilson(hits, total)


def _gold_accuracy(passes: Q) -> Proportion:
    """Step accuracy of the arm's passes on gold chains against their answer keys."""
    gold = list(
        Annotation.objects.filter(passes, chain__is_gold=True).values_list(
            "id", "chain__gold_annotation_id"
        )
    )
    if not gold:
        return wilson(0, 0)
    labels: dict[int, dict[int, int]] = {}
    wanted = [pk for pair in gold for pk in pair]
    for annotation_id, index, rating in StepRating.objects.filter(
        annotation_id__in=wanted
    ).values_list("annotation_id", "step__index", "rating"):
        labels.setdefault(annotation_id, {})[index] = rating
    compared = correct = 0
    for annotation_id, key_id in gold:
        comparison = compare_to_gold(
            gold=labels.get(key_id, {}), mine=labels.get(annotation_id, {})
        )
        compared += comparison.steps_compared
        correct += comparison.steps_correct
    return wilson(correct, compared)


def _arm(project: Project, *, shown: bool) -> Arm:
    passes = _passes(project, shown=shown)
    return Arm(
        chains=Annotation.objects.filter(passes).count(),
        agreement=_shown_agreement(passes) if shown else _held_out_agreement(passes),
        seconds=_seconds(passes),
        gold_accuracy=_gold_accuracy(passes),
    )


def prelabel_effect(*, project: Project) -> PrelabelEffect | None:
    """The comparison for ``project``; None when no pass was leased with verdicts of its
    source (pre-labels never on, or the source has judged nothing that was labeled)."""
    if not Annotation.objects.filter(_passes(project, shown=None)).exists():
        return None
    return PrelabelEffect(
        source=project.prelabel_source,
        holdout=project.prelabel_holdout,
        shown=_arm(project, shown=True),
        held_out=_arm(project, shown=False),
    )
