"""Read paths for projects with their progress and members. Shared by the API, the pages
and the admin-free commands; access checks stay in ``annotation.access``."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import (
    Case,
    CharField,
    Count,
    Exists,
    F,
    IntegerField,
    JSONField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Least
from django.utils import timezone

from annotation.access import project_get_for_member, project_list_for_user
from annotation.models import Annotation, AnnotationSource, Chain, Membership, Project, Role

# A project's work, the chains its progress counts: not gold (every annotator labels gold,
# so it never finishes) and not in an evaluation set (never leased, so never finished).
WORK_CHAINS: dict[str, Any] = {"is_gold": False, "evaluation_set__isnull": True}


def progress_annotations() -> dict[str, Any]:
    """What counts as a project's progress, as annotations on a Project queryset; the
    project list and the lead dashboard both read it, so they cannot disagree.

    - ``chains_total``, ``chains_finished`` (``Chain.is_finished``), ``chains_flagged``:
      gold chains left out (every annotator labels them, so they never finish), and the
      chains of evaluation sets (never leased, so never finished),
    - ``annotations_finished``: finished human annotations, counting at most ``overlap``
      (plus the chain's ``extra_labels``) per chain so that lowering the overlap never
      shows more than 100 %;
    - ``extra_needed``: the extra passes leads asked for (``chain_requeue``).

    Aggregates read ``Chain.finished_count`` instead of joining annotations: the count is
    kept by the submit service, and joining millions of rating rows for a list page would
    not scale. ``annotations_needed`` (chains x overlap + extra) is annotated on top by the caller,
    as an expression over these."""
    # Also filters out the chain-less LEFT JOIN row: LEAST ignores NULL on PostgreSQL, so
    # that row would otherwise count ``overlap`` finished annotations.
    work = Q(**{f"chains__{name}": value for name, value in WORK_CHAINS.items()})
    return {
        "chains_total": Count("chains", filter=work),
        "chains_finished": Count("chains", filter=work & Q(chains__is_finished=True)),
        "chains_flagged": Count("chains", filter=work & Q(chains__is_flagged=True)),
        "annotations_finished": Coalesce(
            Sum(
                Least(
                    "chains__finished_count",
                    F("overlap") + F("chains__extra_labels"),
                    output_field=IntegerField(),
                ),
                filter=work,
            ),
            0,
        ),
        # Passes leads asked for past the overlap (requeued chains).
        "extra_needed": Coalesce(Sum("chains__extra_labels", filter=work), 0),
    }


PROGRESS_FIELDS = (
    "chains_total",
    "chains_finished",
    "chains_flagged",
    "annotations_finished",
    "extra_needed",
)


def chains_imported_count(*, project: Project) -> int:
    """The project's chains (gold and evaluation sets left out, as in
    ``progress_annotations``, so it is never more than ``chains_total``) that carry
    labels an import brought in: counted apart from the chains people finished, since
    an import's labels finish no chain and enter a snapshot only when a lead includes
    them (``snapshot_create``). One query, by the (chain, source) index of annotations."""
    imported = Annotation.objects.filter(chain=OuterRef("pk"), source=AnnotationSource.IMPORT)
    work = Chain.objects.filter(project=project, **WORK_CHAINS)
    return work.filter(Exists(imported)).count()


def annotations_needed(*, chains: int, overlap: int, extra: int) -> int:
    """Passes the project's work needs: ``overlap`` a chain, plus what leads asked for."""
    return chains * overlap + extra


def progress_as_annotators_see_it(
    projects: Iterable[Project], *, now: datetime | None = None
) -> list[Project]:
    """``projects`` (from ``project_list_with_progress``) with the progress each caller
    may see: live for leads and ML staff; for an annotator, the project's progress as it
    stood at the first reading of the day, the same all day for every annotator
    (``progress_as_of`` is that day; None where the progress is live).

    Why: progress leaves gold chains out, so were it live, reading it before and after a
    submit would tell an annotator whether that chain was gold. Frozen for the day, it
    moves once a day by the whole team's work, like the annotator's own gold score
    (``annotator_stats_get``). The first reading of a day stores the day's figures on
    its projects: one conditional UPDATE (a concurrent first reader's figures are kept,
    so every annotator reads the same) and one read back, whatever the number of
    projects; no query at all on the other readings."""
    today = timezone.localdate(now).isoformat()
    shown = list(projects)
    frozen: dict[int, dict[str, Any]] = {}
    stale: dict[int, dict[str, Any]] = {}
    for project in shown:
        project.progress_as_of = None  # type: ignore[attr-defined]
        if project.my_role != Role.ANNOTATOR:  # type: ignore[attr-defined]
            continue
        if project.annotator_progress.get("day") == today:
            frozen[project.pk] = project.annotator_progress
        else:
            stale[project.pk] = {"day": today, **{f: getattr(project, f) for f in PROGRESS_FIELDS}}
    if stale:
        # A missing key is SQL's NULL, which a bare ~Q(...) would leave out.
        unset = Q(annotator_progress__day__isnull=True) | ~Q(annotator_progress__day=today)
        Project.objects.filter(unset, pk__in=stale).update(
            annotator_progress=Case(
                *(When(pk=pk, then=Value(figures, JSONField())) for pk, figures in stale.items()),
                output_field=JSONField(),
            )
        )
        frozen.update(Project.objects.filter(pk__in=stale).values_list("pk", "annotator_progress"))
    for project in shown:
        figures = frozen.get(project.pk)
        if figures is None:
            continue
        for name in PROGRESS_FIELDS:
            setattr(project, name, figures.get(name, 0))  # a day stored before a field: 0
        project.annotations_needed = annotations_needed(  # type: ignore[attr-defined]
            chains=figures["chains_total"],
            overlap=project.overlap,
            extra=figures.get("extra_needed", 0),
        )
        project.progress_as_of = figures["day"]  # type: ignore[attr-defined]
    return shown


def project_list_with_progress(*, user: User | AnonymousUser) -> QuerySet[Project]:
    """The user's projects, each annotated in one query with ``progress_annotations``,
    ``annotations_needed`` = chains x overlap + extra passes, and ``my_role``: the user's role (a
    superuser without a membership counts as lead). Live figures: pass what is shown
    through ``progress_as_annotators_see_it``."""
    if not user.is_authenticated:
        return Project.objects.none()
    role: Subquery | Coalesce = Subquery(
        Membership.objects.filter(project=OuterRef("pk"), user_id=user.pk).values("role")[:1],
        output_field=CharField(),
    )
    if user.is_superuser:
        role = Coalesce(role, Value(Role.LEAD), output_field=CharField())
    return (
        project_list_for_user(user=user)
        .annotate(**progress_annotations(), my_role=role)
        .annotate(annotations_needed=F("chains_total") * F("overlap") + F("extra_needed"))
        .order_by("id")
    )


def project_get_with_progress(*, user: User | AnonymousUser, project_id: int | str) -> Project:
    """One project with the annotations of ``project_list_with_progress``, its progress
    as the caller may see it (``progress_as_annotators_see_it``).
    Raises Http404 when the user is not a member (see ``project_get_for_member``)."""
    project = project_get_for_member(user=user, project_id=project_id)
    live = project_list_with_progress(user=user).get(pk=project.pk)
    (shown,) = progress_as_annotators_see_it([live])
    return shown


def membership_list(*, project: Project) -> QuerySet[Membership]:
    """The project's members, leads first, then by username."""
    role_order = {Role.LEAD: 0, Role.ML: 1, Role.ANNOTATOR: 2}
    return (
        Membership.objects.filter(project=project)
        .select_related("user")
        .annotate(
            role_order=Case(
                *(When(role=role, then=Value(rank)) for role, rank in role_order.items()),
                default=Value(9),
                output_field=IntegerField(),
            )
        )
        .order_by("role_order", "user__username")
    )
