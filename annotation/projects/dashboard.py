"""Read paths of the lead dashboard (issue 5, point 7): progress, throughput per annotator
per day, label distribution, agreement, gold scores and time per chain, each as a total
and as a series per day.

Everything is computed with a fixed number of aggregate queries, whatever the size of the
project (pinned in tests/annotation/projects/test_dashboard_api.py): the rows that come back are one
per (annotator, day), (day, rating) or day, never one per annotation or rating, except for
the agreement, which ``annotation.quality.agreement`` computes from the ratings themselves.
Access checks stay in ``annotation.access``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

import numpy as np
from django.db import connection
from django.db.models import Aggregate, Count, FloatField
from django.db.models.functions import TruncDate
from django.utils import timezone

from annotation.models import Annotation, AnnotationSource, Project, StepRating
from annotation.projects.selectors import (
    annotations_needed,
    chains_imported_count,
    progress_annotations,
)
from annotation.quality.agreement import (
    CurrentRatings,
    ProjectAgreement,
    agreement_compute,
    current_human_ratings,
)
from annotation.quality.agreement_math import CATEGORIES, alpha_from_coincidences
from annotation.quality.prelabel_effects import PrelabelEffect, prelabel_effect

try:  # the gold chains feature (annotation.quality.gold_reads), when installed
    from annotation.quality.gold_reads import gold_passes
except ImportError:  # pragma: no cover - only before that feature lands
    gold_passes = None  # type: ignore[assignment]

# The per-day series cover at most this many days, ending today (or on the last day with
# activity): a chart of a year-long project stays readable and its payload small.
DAYS_SHOWN = 90


class _Percentile(Aggregate):
    """PostgreSQL's ``percentile_cont(f) WITHIN GROUP (ORDER BY x)``: the median and p90
    come out of the database as one number per group instead of every duration."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression: str, *, fraction: float, **extra: Any) -> None:
        # A float we chose, never user input: safe to put into the SQL as text.
        super().__init__(expression, fraction=repr(float(fraction)), **extra)


@dataclass(frozen=True)
class Progress:
    chains_total: int
    chains_finished: int
    chains_flagged: int
    overlap: int
    annotations_needed: int
    annotations_finished: int
    # Chains carrying an import's labels (``chains_imported_count``), apart from those
    # people finished.
    chains_imported: int = 0


@dataclass(frozen=True)
class AnnotatorThroughput:
    annotator_id: int
    username: str
    total: int
    per_day: list[int]


@dataclass(frozen=True)
class DurationStats:
    chains: int
    median_ms: float | None
    p90_ms: float | None


@dataclass(frozen=True)
class GoldRow:
    """An annotator's score on the gold chains they labeled."""

    annotator_id: int
    username: str
    chains: int
    steps_compared: int
    step_accuracy: float | None
    first_error_match: float | None


@dataclass(frozen=True)
class Dashboard:
    """What the dashboard shows. ``days`` are the dates (in the server's TIME_ZONE) of
    every ``per_day`` list, oldest first."""

    progress: Progress
    days: list[date]
    annotations_per_day: list[int]
    annotations_cumulative: list[int]
    throughput: list[AnnotatorThroughput]
    label_totals: dict[int, int]
    labels_per_day: dict[int, list[int]]
    duration: DurationStats
    duration_per_day: list[DurationStats]
    agreement: ProjectAgreement
    alpha_per_day: list[float | None]
    gold: list[GoldRow] | None = None
    gold_accuracy_per_day: list[float | None] = field(default_factory=list)
    # Verification: chains labeled with machine verdicts shown against those held out.
    prelabels: PrelabelEffect | None = None


def _progress(*, project: Project) -> Progress:
    """The project list's progress figures (``progress_annotations``), in one query."""
    row = (
        Project.objects.filter(pk=project.pk)
        .annotate(**progress_annotations())
        .values(  # type: ignore[misc]  # names annotated by progress_annotations()
            "chains_total",
            "chains_finished",
            "chains_flagged",
            "annotations_finished",
            "extra_needed",
        )
        .get()
    )
    extra = row.pop("extra_needed")
    return Progress(
        **row,
        overlap=project.overlap,
        annotations_needed=annotations_needed(
            chains=row["chains_total"], overlap=project.overlap, extra=extra
        ),
        chains_imported=chains_imported_count(project=project),
    )


def _day_range(*, first: date | None, last: date | None, today: date) -> list[date]:
    """Every day from the first with activity to today, at most DAYS_SHOWN of them."""
    if first is None:
        return []
    end = max(today, last or today)
    start = max(first, end - timedelta(days=DAYS_SHOWN - 1))
    return [start + timedelta(days=n) for n in range((end - start).days + 1)]


def _durations(*, human: Any) -> tuple[DurationStats, dict[date, DurationStats]]:
    """Median and p90 of Annotation.duration_ms, overall and per day. On PostgreSQL two
    aggregate queries; elsewhere (the SQLite demo) the durations are read and ranked here."""
    timed = human.filter(duration_ms__isnull=False)
    if connection.vendor == "postgresql":
        overall = timed.aggregate(
            chains=Count("id"),
            median=_Percentile("duration_ms", fraction=0.5),
            p90=_Percentile("duration_ms", fraction=0.9),
        )
        rows = (
            timed.annotate(day=TruncDate("created_at"))
            .values("day")
            .annotate(
                chains=Count("id"),
                median=_Percentile("duration_ms", fraction=0.5),
                p90=_Percentile("duration_ms", fraction=0.9),
            )
            .order_by()
        )
        by_day = {
            row["day"]: DurationStats(row["chains"], row["median"], row["p90"]) for row in rows
        }
        return DurationStats(overall["chains"], overall["median"], overall["p90"]), by_day
    values: dict[date, list[int]] = defaultdict(list)
    for day, duration in timed.annotate(day=TruncDate("created_at")).values_list(
        "day", "duration_ms"
    ):
        values[day].append(duration)
    every = [v for day_values in values.values() for v in day_values]
    return _python_percentiles(every), {d: _python_percentiles(v) for d, v in values.items()}


def _python_percentiles(values: list[int]) -> DurationStats:
    if not values:
        return DurationStats(0, None, None)
    ordered = np.asarray(sorted(values), dtype=np.float64)
    # numpy's default "linear" method is percentile_cont's definition.
    return DurationStats(
        len(values), float(np.percentile(ordered, 50)), float(np.percentile(ordered, 90))
    )


def _alpha_by_day(
    *, project: Project, days: list[date], data: CurrentRatings
) -> list[float | None]:
    """Krippendorff's alpha as it stood at the end of each day: over the steps whose
    current ratings had all come in by then. A step counts from the day of its last
    rating, with the ratings it has now (a later correction is not replayed back in
    time). One coincidence matrix per day, summed cumulatively, so the whole series
    costs one pass over ``data`` (the project's ``current_human_ratings``) plus one query
    for the days of the annotations."""
    if not days:
        return []
    if not len(data):
        return [None] * len(days)
    day_of = dict(
        Annotation.objects.filter(
            chain__project=project,
            source=AnnotationSource.HUMAN,
            superseded_by__isnull=True,
        )
        .annotate(day=TruncDate("created_at"))
        .values_list("id", "day")
    )
    first = days[0]
    # Day number of each rating relative to the first shown day; earlier days fold into 0.
    rating_day = np.array(
        [max(0, (day_of[a] - first).days) for a in data.annotation.tolist()], dtype=np.int64
    )
    _, unit_pos = np.unique(data.step, return_inverse=True)
    unit_pos = unit_pos.reshape(-1)
    n_units = int(unit_pos.max()) + 1
    category = data.rating + 1
    counts = (
        np.bincount(unit_pos * CATEGORIES + category, minlength=n_units * CATEGORIES)
        .reshape(n_units, CATEGORIES)
        .astype(np.float64)
    )
    unit_day = np.zeros(n_units, dtype=np.int64)
    np.maximum.at(unit_day, unit_pos, rating_day)
    m = counts.sum(axis=1)
    pairable = m >= 2
    pc, weight, pday = counts[pairable], 1.0 / (m[pairable] - 1), unit_day[pairable]
    per_unit = (pc[:, :, None] * pc[:, None, :] - pc[:, :, None] * np.eye(CATEGORIES)) * weight[
        :, None, None
    ]
    o = np.zeros((len(days), CATEGORIES, CATEGORIES))
    np.add.at(o, np.minimum(pday, len(days) - 1), per_unit)
    alphas = alpha_from_coincidences(np.cumsum(o, axis=0))
    return [None if np.isnan(a) else float(a) for a in alphas]


def _gold(
    *, project: Project, days: list[date], names: dict[int, str]
) -> tuple[list[GoldRow] | None, list[float | None]]:
    """Per-annotator gold scores (step accuracy, first-error match) and the step accuracy
    of all annotators together as it stood at the end of each day; (None, []) while the
    project has no gold passes. One query without gold chains, a few with them
    (``gold_passes``)."""
    if gold_passes is None:  # the gold chains feature is not installed
        return None, []
    passes = gold_passes(project=project)
    if not passes:
        return None, []
    rows: dict[int, list[int]] = {}  # annotator -> [chains, compared, correct, fe matches]
    compared_by_day = [0] * len(days)
    correct_by_day = [0] * len(days)
    first = days[0] if days else None
    for item in passes:
        row = rows.setdefault(item.annotator_id, [0, 0, 0, 0])
        c = item.comparison
        row[0] += 1
        row[1] += c.steps_compared
        row[2] += c.steps_correct
        row[3] += int(c.first_error_match)
        if first is not None:
            at = min(len(days) - 1, max(0, (timezone.localdate(item.created_at) - first).days))
            compared_by_day[at] += c.steps_compared
            correct_by_day[at] += c.steps_correct
    series: list[float | None] = []
    compared = correct = 0
    for n_compared, n_correct in zip(compared_by_day, correct_by_day, strict=True):
        compared += n_compared
        correct += n_correct
        series.append(correct / compared if compared else None)
    return [
        GoldRow(
            annotator_id=annotator,
            username=names.get(annotator, ""),
            chains=chains,
            steps_compared=n_compared,
            step_accuracy=n_correct / n_compared if n_compared else None,
            first_error_match=matches / chains if chains else None,
        )
        for annotator, (chains, n_compared, n_correct, matches) in rows.items()
    ], series


def _labels(
    *, project: Project, position: dict[date, int]
) -> tuple[dict[int, int], dict[int, list[int]]]:
    """The current human ratings of ``project`` per rating: in all, and per day of the
    window (``position``: a day's place in it; days before it count in the totals only).
    One query."""
    label_totals = {-1: 0, 0: 0, 1: 0}
    labels_per_day = {rating: [0] * len(position) for rating in label_totals}
    for day, rating, n in (
        StepRating.objects.filter(
            annotation__chain__project=project,
            annotation__source=AnnotationSource.HUMAN,
            annotation__superseded_by__isnull=True,
        )
        .annotate(day=TruncDate("annotation__created_at"))
        .values("day", "rating")
        .annotate(n=Count("id"))
        .order_by()
        .values_list("day", "rating", "n")
    ):
        label_totals[rating] += n
        at = position.get(day)
        if at is not None:
            labels_per_day[rating][at] += n
    return label_totals, labels_per_day


def project_dashboard(*, project: Project, now: datetime | None = None) -> Dashboard:
    """Everything on the lead dashboard of ``project``. Nine queries without gold passes:
    chains, annotations per (annotator, day), durations overall and per day, ratings per
    (day, rating), the current ratings (read once, for the agreement and its series), the
    agreement's usernames, the annotation days of the series, the gold chains (three
    more once gold passes exist), and whether a pass was leased with machine verdicts
    (about ten more once one was: ``quality.prelabel_effects``)."""
    today = timezone.localdate(now) if now is not None else timezone.localdate()
    # Passes as submitted: an annotator's revision of one is no new work.
    human = Annotation.objects.filter(
        chain__project=project, source=AnnotationSource.HUMAN, supersedes__isnull=True
    )

    per_annotator_day = list(
        human.annotate(day=TruncDate("created_at"))
        .values("annotator_id", "annotator__username", "day")
        .annotate(n=Count("id"))
        .order_by()
    )
    active_days = [row["day"] for row in per_annotator_day]
    days = _day_range(
        first=min(active_days, default=None), last=max(active_days, default=None), today=today
    )
    position = {day: n for n, day in enumerate(days)}

    def slot(day: date) -> int | None:
        # Days before the window are outside every series (totals still count them).
        return position.get(day)

    names: dict[int, str] = {}
    totals: dict[int, int] = defaultdict(int)
    series: dict[int, list[int]] = {}
    per_day_total = [0] * len(days)
    before_window = 0
    for row in per_annotator_day:
        annotator = row["annotator_id"]
        names[annotator] = row["annotator__username"]
        totals[annotator] += row["n"]
        at = slot(row["day"])
        if at is None:
            before_window += row["n"]
            continue
        series.setdefault(annotator, [0] * len(days))[at] += row["n"]
        per_day_total[at] += row["n"]
    throughput = [
        AnnotatorThroughput(a, names[a], totals[a], series.get(a, [0] * len(days))) for a in names
    ]
    cumulative, running = [], before_window
    for count in per_day_total:
        running += count
        cumulative.append(running)

    label_totals, labels_per_day = _labels(project=project, position=position)
    duration, duration_by_day = _durations(human=human)
    gold, gold_series = _gold(project=project, days=days, names=names)
    empty = DurationStats(0, None, None)
    ratings = current_human_ratings(project=project)
    return Dashboard(
        progress=_progress(project=project),
        days=days,
        annotations_per_day=per_day_total,
        annotations_cumulative=cumulative,
        throughput=sorted(throughput, key=lambda t: (-t.total, t.username)),
        label_totals=label_totals,
        labels_per_day=labels_per_day,
        duration=duration,
        duration_per_day=[duration_by_day.get(day, empty) for day in days],
        agreement=agreement_compute(project=project, data=ratings),
        alpha_per_day=_alpha_by_day(project=project, days=days, data=ratings),
        gold=gold,
        gold_accuracy_per_day=gold_series,
        prelabels=prelabel_effect(project=project),
    )
