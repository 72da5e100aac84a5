"""Read paths of the annotator workspace: an annotator's own counts. Access checks stay
in ``annotation.selectors``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.db.models import Count, Q
from django.utils import timezone

from annotation.models import Annotation, AnnotationSource, Assignment, AssignmentStatus, Project

if TYPE_CHECKING:
    from django.contrib.auth.models import User


@dataclass(frozen=True)
class AnnotatorStats:
    """An annotator's own work in one project. ``today`` starts at midnight in the
    server's TIME_ZONE. ``gold_accuracy`` is None until gold chains exist in the
    project (they do not yet: the quality issue adds them)."""

    annotated_today: int
    annotated_total: int
    skipped_total: int
    gold_accuracy: float | None
    gold_chains: int
    day_start: datetime


def annotator_stats_get(
    *, project: Project, user: User, now: datetime | None = None
) -> AnnotatorStats:
    """Counts of the caller's finished chains (today and in total) and skipped chains in
    ``project``. Two aggregate queries on indexed columns, whatever the volume."""
    now = now if now is not None else timezone.now()
    day_start = timezone.localtime(now).replace(hour=0, minute=0, second=0, microsecond=0)
    annotated = Annotation.objects.filter(
        chain__project=project, annotator=user, source=AnnotationSource.HUMAN
    ).aggregate(
        total=Count("chain", distinct=True),
        today=Count("chain", distinct=True, filter=Q(created_at__gte=day_start)),
    )
    skipped = Assignment.objects.filter(
        project=project, annotator=user, status=AssignmentStatus.SKIPPED
    ).count()
    return AnnotatorStats(
        annotated_today=annotated["today"],
        annotated_total=annotated["total"],
        skipped_total=skipped,
        gold_accuracy=None,
        gold_chains=0,
        day_start=day_start,
    )
