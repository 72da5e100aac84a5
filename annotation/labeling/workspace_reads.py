"""Read paths of the annotator workspace: an annotator's own counts. Access checks stay
in ``annotation.access``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.db.models import Count, Q
from django.utils import timezone

from annotation.access import membership_role
from annotation.models import (
    Annotation,
    AnnotationSource,
    Assignment,
    AssignmentStatus,
    Chain,
    Project,
    ScreeningStatus,
)
from annotation.quality.gold_reads import (
    gold_score_for_annotator,
    screening_applies,
    screening_state_get,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True)
class GoldSummary:
    """The caller's own gold score: aggregates only, never which chains were gold."""

    chains: int
    step_accuracy: float | None
    first_error_match: float | None


@dataclass(frozen=True)
class ScreeningSummary:
    """Where the caller stands in the project's screening (see quality/gold.py)."""

    status: str
    required: int
    done: int
    pass_accuracy: float
    step_accuracy: float | None
    message: str


@dataclass(frozen=True)
class AnnotatorStats:
    """An annotator's own work in one project. ``today`` starts at midnight in the
    server's TIME_ZONE.

    ``gold`` counts only gold chains labeled before ``day_start``: were it updated at each
    submit, an annotator could watch it after every chain and tell which were gold. It is
    None until then. ``gold_accuracy`` and ``gold_chains`` repeat it for older clients.
    ``screening`` is None unless the project screens the caller."""

    annotated_today: int
    annotated_total: int
    skipped_total: int
    gold_accuracy: float | None
    gold_chains: int
    day_start: datetime
    gold: GoldSummary | None = None
    screening: ScreeningSummary | None = None
    steps_today: int = 0  # steps the caller rated today, in the chains counted today


_SCREENING_MESSAGES = {
    ScreeningStatus.PASSED: "You passed screening.",
    ScreeningStatus.FAILED: "You did not pass screening; a project lead can give you another "
    "attempt.",
}


def _screening_summary(*, project: Project, user: User, now: datetime) -> ScreeningSummary | None:
    if not screening_applies(project=project, role=membership_role(user=user, project=project)):
        return None
    state = screening_state_get(project=project, user=user, now=now)
    if state.status != ScreeningStatus.PENDING:
        message = _SCREENING_MESSAGES[ScreeningStatus(state.status)]
    elif state.waiting_for_gold:
        message = "Screening chains are not ready yet; a project lead has to add them."
    else:
        message = f"Screening: {state.done} of {state.required} chains done."
    return ScreeningSummary(
        status=state.status,
        required=state.required,
        done=state.done,
        pass_accuracy=state.pass_accuracy,
        step_accuracy=state.step_accuracy,
        message=message,
    )


def annotator_stats_get(
    *, project: Project, user: User, now: datetime | None = None
) -> AnnotatorStats:
    """Counts of the caller's finished chains (today and in total) and skipped chains in
    ``project``, with the caller's gold score and screening when the project has them.
    Two aggregate queries on indexed columns, whatever the volume, plus one to see that
    the project has no gold chain."""
    now = now if now is not None else timezone.now()
    day_start = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    # Passes as submitted: revising one is neither a chain nor steps done today.
    annotated = Annotation.objects.filter(
        chain__project=project,
        annotator=user,
        source=AnnotationSource.HUMAN,
        supersedes__isnull=True,
    ).aggregate(
        total=Count("chain", distinct=True),
        today=Count("chain", distinct=True, filter=Q(created_at__gte=day_start)),
        steps_today=Count("ratings", filter=Q(created_at__gte=day_start)),
    )
    skipped = Assignment.objects.filter(
        project=project, annotator=user, status=AssignmentStatus.SKIPPED
    ).count()
    gold = None
    if Chain.objects.filter(project=project, is_gold=True).exists():
        mine = gold_score_for_annotator(project=project, user=user, created_before=day_start)
        if mine is not None:
            gold = GoldSummary(
                chains=mine.chains,
                step_accuracy=mine.step_accuracy,
                first_error_match=mine.first_error_match,
            )
    return AnnotatorStats(
        annotated_today=annotated["today"],
        annotated_total=annotated["total"],
        steps_today=annotated["steps_today"],
        skipped_total=skipped,
        gold_accuracy=gold.step_accuracy if gold else None,
        gold_chains=gold.chains if gold else 0,
        day_start=day_start,
        gold=gold,
        screening=_screening_summary(project=project, user=user, now=now)
        if project.screening_chains
        else None,
    )
