"""Read paths for projects with their progress and members. Shared by the API, the pages
and the admin-free commands; access checks stay in ``annotation.selectors``."""
from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db.models import (
    Case,
    CharField,
    Count,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.functions import Coalesce, Least

from annotation.models import Membership, Project, Role
from annotation.selectors import project_get_for_member, project_list_for_user


def progress_annotations() -> dict[str, Any]:
    """What counts as a project's progress, as annotations on a Project queryset; the
    project list and the lead dashboard both read it, so they cannot disagree.

    - ``chains_total``, ``chains_finished`` (``Chain.is_finished``), ``chains_flagged``:
      gold chains left out (every annotator labels them, so they never finish),
    - ``annotations_finished``: finished human annotations, counting at most ``overlap``
      per chain so that lowering the overlap never shows more than 100 %.

    Aggregates read ``Chain.finished_count`` instead of joining annotations: the count is
    kept by the submit service, and joining millions of rating rows for a list page would
    not scale. ``annotations_needed`` (chains x overlap) is annotated on top by the caller,
    as an expression over these."""
    # Also filters out the chain-less LEFT JOIN row: LEAST ignores NULL on PostgreSQL, so
    # that row would otherwise count ``overlap`` finished annotations.
    work = Q(chains__is_gold=False)
    return {
        "chains_total": Count("chains", filter=work),
        "chains_finished": Count("chains", filter=work & Q(chains__is_finished=True)),
        "chains_flagged": Count("chains", filter=work & Q(chains__is_flagged=True)),
        "annotations_finished": Coalesce(
            Sum(
                Least("chains__finished_count", "overlap", output_field=IntegerField()),
                filter=work,
            ),
            0,
        ),
    }


def project_list_with_progress(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Project]:
    """The user's projects, each annotated in one query with ``progress_annotations``,
    ``annotations_needed`` = chains x overlap, and ``my_role``: the user's role (a
    superuser without a membership counts as lead)."""
    role = Subquery(
        Membership.objects.filter(project=OuterRef("pk"), user_id=user.pk).values("role")[:1],
        output_field=CharField(),
    )
    if getattr(user, "is_superuser", False):
        role = Coalesce(role, Value(Role.LEAD), output_field=CharField())
    return (
        project_list_for_user(user=user)
        .annotate(**progress_annotations(), my_role=role)
        .annotate(annotations_needed=F("chains_total") * F("overlap"))
        .order_by("id")
    )


def project_get_with_progress(
    *, user: AbstractBaseUser | AnonymousUser, project_id: int | str
) -> Project:
    """One project with the annotations of ``project_list_with_progress``.
    Raises Http404 when the user is not a member (see ``project_get_for_member``)."""
    project = project_get_for_member(user=user, project_id=project_id)
    return project_list_with_progress(user=user).get(pk=project.pk)


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
