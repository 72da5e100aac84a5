"""Machine labels (``MachineLabel``) as leads read them beside people's votes: per chain and
source, the verdict of the newest run on each step, and the first error each source names.

A source may have labelled a step in several runs (a rollout run redone with more
rollouts, a second judge); the pages show one verdict per step and source, the newest
run's (``created_at``, then id), so a rerun replaces what is shown without erasing what
was stored. A verdict is the row's ``rating``; a row with only a ``value`` (P(correct))
gives no verdict, so a source's first error is read from ratings alone.

These are never votes: nothing here reaches consensus, agreement, overlap or the
finished count (``quality.consensus`` and ``quality.agreement`` read ``Annotation``
rows only)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.db.models import Exists, F, IntegerField, Min, OuterRef, Q, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce

from annotation.first_error import first_error
from annotation.models import AnnotationSource, MachineLabel, MachineSource, StepRating

# A first error past every step: "this source found none", for comparisons in SQL.
_NO_ERROR = 1_000_000_000


@dataclass(frozen=True, slots=True)
class MachineVerdict:
    """The newest run's label of one source on one step."""

    rating: int | None
    value: float | None
    confidence: float | None
    # Math-Shepherd's hard label: some rollout from the step reached the answer.
    hard: bool | None
    detail: dict[str, Any]
    model: str
    config_hash: str
    run_kind: str
    run_id: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class MachineColumn:
    """One source's labels of a chain, a verdict (or None) per step position."""

    source: str
    name: str
    verdicts: list[MachineVerdict | None]
    # What the source stated (``annotation.first_error``, "stated"): the first step rated
    # -1; -1 when it rated steps and none is wrong; None when it rated none (values only).
    first_error: int | None
    # Whether ``first_error`` is the human consensus's; None when either is unknown.
    agrees_with_consensus: bool | None = None
    runs: list[str] = field(default_factory=list)


def hard_label(*, rating: int | None, value: float | None, detail: Any) -> bool | None:
    """A step's hard label (Math-Shepherd's: some rollout from its prefix reached the
    answer): the source's own ``detail["hard"]`` when it stated one, else a value above 0
    (a share of rollouts that reached it), else a +1 verdict; None when nothing says.

    >>> hard_label(rating=None, value=0.25, detail={})
    True
    >>> hard_label(rating=1, value=None, detail={"hard": False})
    False
    >>> hard_label(rating=None, value=None, detail={})
    """
    stated = detail.get("hard") if isinstance(detail, dict) else None
    if isinstance(stated, bool):
        return stated
    if value is not None:
        return value > 0
    if rating is not None:
        return rating == 1
    return None


def _source_order(source: str) -> int:
    values = list(MachineSource.values)
    return values.index(source) if source in values else len(values)


def chain_machine_labels(*, chain_id: int, step_count: int) -> list[MachineColumn]:
    """Every source's labels of the chain, the newest run's per step, one column per
    source that labelled it (in ``MachineSource`` order). One query."""
    newest: dict[str, dict[int, MachineVerdict]] = {}
    runs: dict[str, list[str]] = {}
    rows = (
        MachineLabel.objects.filter(chain_id=chain_id)
        .annotate(index=F("step__index"))
        .order_by("source", "index", "-created_at", "-id")
    )
    for row in rows:
        by_step = newest.setdefault(row.source, {})
        index: int = row.index
        if index in by_step:  # an older run's label of the same step
            continue
        by_step[index] = MachineVerdict(
            rating=row.rating,
            value=row.value,
            confidence=row.confidence,
            hard=hard_label(rating=row.rating, value=row.value, detail=row.detail),
            detail=row.detail if isinstance(row.detail, dict) else {},
            model=row.model,
            config_hash=row.config_hash,
            run_kind=row.run_kind,
            run_id=row.run_id,
            created_at=row.created_at,
        )
        source, run_kind, run_id = row.source, row.run_kind, row.run_id
        run = f"{run_kind}:{run_id}"
        if run not in runs.setdefault(source, []):
            runs[source].append(run)
    columns = []
    for source in sorted(newest, key=_source_order):
        verdicts = [newest[source].get(index) for index in range(step_count)]
        columns.append(
            MachineColumn(
                source=source,
                name=_source_name(source),
                verdicts=verdicts,
                first_error=first_error(
                    [v.rating if v else None for v in verdicts], reading="stated"
                ),
                runs=runs[source],
            )
        )
    return columns


def _source_name(source: str) -> str:
    return str(MachineSource(source).label) if source in MachineSource.values else source


def with_consensus(
    *, columns: list[MachineColumn], consensus: list[int | None], tied: list[bool]
) -> list[MachineColumn]:
    """``columns`` with ``agrees_with_consensus`` set against the human consensus's first
    error. Unknown (None) where a step up to that error has no consensus label, or the
    votes on it tie: the tie rule's pick is not the people's verdict."""
    settled = [
        None if index < len(tied) and tied[index] else label
        for index, label in enumerate(consensus)
    ]
    human = first_error(settled, reading="reference")
    return [
        replace(
            column,
            agrees_with_consensus=None
            if human is None or column.first_error is None
            else column.first_error == human,
        )
        for column in columns
    ]


def machine_first_errors(*, chain_ids: list[int]) -> dict[int, dict[str, int]]:
    """Each chain's first error by source (``MachineColumn.first_error``; a source with
    no verdict on the chain is absent), for a page of the data manager. One query."""
    if not chain_ids:
        return {}
    seen: set[tuple[int, str, int]] = set()
    ratings: dict[int, dict[str, dict[int, int | None]]] = {}
    for chain_id, source, index, rating in (
        MachineLabel.objects.filter(chain_id__in=chain_ids, rating__isnull=False)
        .order_by("chain_id", "source", "step__index", "-created_at", "-id")
        .values_list("chain_id", "source", "step__index", "rating")
    ):
        if (chain_id, source, index) in seen:
            continue
        seen.add((chain_id, source, index))
        ratings.setdefault(chain_id, {}).setdefault(source, {})[index] = rating
    out: dict[int, dict[str, int]] = {}
    for chain_id, by_source in ratings.items():
        out[chain_id] = {}
        for source in sorted(by_source, key=_source_order):
            rated = by_source[source]
            labels = [rated.get(index) for index in range(max(rated) + 1)]
            found = first_error(labels, reading="stated")
            if found is not None:
                out[chain_id][source] = found
    return out


def _newest_verdicts() -> QuerySet[MachineLabel]:
    """Rated labels no later run of their source replaced on their step."""
    later = MachineLabel.objects.filter(step=OuterRef("step"), source=OuterRef("source")).filter(
        Q(created_at__gt=OuterRef("created_at"))
        | Q(created_at=OuterRef("created_at"), id__gt=OuterRef("id"))
    )
    return MachineLabel.objects.filter(rating__isnull=False).exclude(Exists(later))


def machines_disagree(chains: QuerySet[Any]) -> QuerySet[Any]:
    """The ``chains`` on which two machine sources name different first errors (one may
    find none), by the newest run's verdicts: a filter that runs in the page's query.

    Each source's first error is the least index it rated -1 (``_NO_ERROR`` for none);
    a chain matches when the least of them is below the greatest. A chain with one
    source, or none, never matches."""
    per_source = (
        _newest_verdicts()
        .filter(chain=OuterRef("pk"))
        .values("source")
        .annotate(
            first=Coalesce(
                Min("step__index", filter=Q(rating=-1)),
                Value(_NO_ERROR),
                output_field=IntegerField(),
            )
        )
        .values("first")
    )
    return chains.alias(
        machine_low=Subquery(per_source.order_by("first")[:1], output_field=IntegerField()),
        machine_high=Subquery(per_source.order_by("-first")[:1], output_field=IntegerField()),
    ).filter(machine_low__lt=F("machine_high"))


def machine_chain_labels(
    *, project_id: int, source: str
) -> dict[int, tuple[tuple[int | None, ...], float]]:
    """Each chain's labels by one source, as a labeler gives them: the newest run's verdict
    per step (None where the source gave none), and the source's confidence in the chain,
    the least it gives any of its steps (a chain is as sure as its least sure step; 1.0
    where the source states none, as Monte-Carlo hard labels are taken as they are). What
    the simulator's machine arms read (``ml.simulate``). One query, streamed."""
    ratings: dict[int, dict[int, int | None]] = {}
    least: dict[int, float] = {}
    steps: dict[int, int] = {}
    seen: set[tuple[int, int]] = set()
    rows = (
        MachineLabel.objects.filter(project_id=project_id, source=source, rating__isnull=False)
        .order_by("chain_id", "step__index", "-created_at", "-id")
        .values_list("chain_id", "step__index", "rating", "confidence", "chain__step_count")
    )
    for chain_id, index, rating, confidence, step_count in rows.iterator(chunk_size=5000):
        if (chain_id, index) in seen:  # an older run's label of the same step
            continue
        seen.add((chain_id, index))
        ratings.setdefault(chain_id, {})[index] = rating
        steps[chain_id] = step_count
        if confidence is not None:
            least[chain_id] = min(least.get(chain_id, 1.0), confidence)
    return {
        chain_id: (
            tuple(by_index.get(index) for index in range(steps[chain_id])),
            least.get(chain_id, 1.0),
        )
        for chain_id, by_index in ratings.items()
    }


def _first_error_bounds(
    rows: QuerySet[Any], *, group: str, index: str
) -> tuple[Subquery, Subquery]:
    """The least and greatest of the first errors of ``rows`` (one chain's), grouped by
    ``group``: each group's first error is the least ``index`` it rated -1, _NO_ERROR
    for none."""
    per_group = (
        rows.values(group)
        .annotate(
            first=Coalesce(
                Min(index, filter=Q(rating=-1)), Value(_NO_ERROR), output_field=IntegerField()
            )
        )
        .values("first")
    )
    return (
        Subquery(per_group.order_by("first")[:1], output_field=IntegerField()),
        Subquery(per_group.order_by("-first")[:1], output_field=IntegerField()),
    )


def machines_disagree_with_people(chains: QuerySet[Any]) -> QuerySet[Any]:
    """The ``chains`` on which a machine source (its newest run's verdicts) names another
    first error than a person's current pass does: some pair of them differs, which is
    ``machine_low < human_high or human_low < machine_high``. A chain no person or no
    machine labeled never matches."""
    machine_low, machine_high = _first_error_bounds(
        _newest_verdicts().filter(chain=OuterRef("pk")), group="source", index="step__index"
    )
    passes = StepRating.objects.filter(
        annotation__chain=OuterRef("pk"),
        annotation__source=AnnotationSource.HUMAN,
        annotation__superseded_by__isnull=True,
    )
    human_low, human_high = _first_error_bounds(passes, group="annotation", index="step__index")
    return chains.alias(
        vs_machine_low=machine_low,
        vs_machine_high=machine_high,
        vs_human_low=human_low,
        vs_human_high=human_high,
    ).filter(Q(vs_machine_low__lt=F("vs_human_high")) | Q(vs_human_low__lt=F("vs_machine_high")))
