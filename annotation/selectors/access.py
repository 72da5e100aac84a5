"""Read paths shared by the API, the pages and the commands."""

from __future__ import annotations

import functools
from collections.abc import Iterable

from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.db.models import QuerySet
from django.http import Http404

from annotation.models import Membership, Project, Role
from annotation.rows import fetch_models, model_from_row, model_width, select_columns


def project_list_for_user(*, user: User | AnonymousUser) -> QuerySet[Project]:
    """Projects the user belongs to. Superusers see every project."""
    if not user.is_authenticated:
        return Project.objects.none()
    if user.is_superuser:
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user).distinct()


def membership_role(*, user: User | AnonymousUser, project: Project) -> str | None:
    """The user's role in the project, or None. A superuser counts as a lead everywhere."""
    if not user.is_authenticated:
        return None
    if user.is_superuser:
        return Role.LEAD
    return (
        Membership.objects.filter(project=project, user=user).values_list("role", flat=True).first()
    )


def project_get_for_member(
    *,
    user: User | AnonymousUser,
    project_id: int | str,
    roles: Iterable[str] | None = None,
) -> Project:
    """The project if ``user`` is a member (with one of ``roles`` when given).

    A project the user does not belong to raises Http404, not 403: its existence is not
    revealed. A member without the needed role gets PermissionDenied."""
    from django.core.exceptions import PermissionDenied

    try:
        project = Project.objects.get(pk=int(project_id))
    except (Project.DoesNotExist, ValueError, TypeError):
        raise Http404("No such project.") from None
    role = membership_role(user=user, project=project)
    if role is None:
        raise Http404("No such project.")
    if roles is not None and role not in set(roles) and not user.is_superuser:
        raise PermissionDenied("Your role in this project does not allow this.")
    return project


def project_member_sql(*, user: str) -> str:
    """SQL that holds when the user ``user`` (an SQL expression: a parameter or a column)
    is a member of the project aliased ``p``: the labeling queue's access rule, for the
    plain-SQL lookups on its hot path (superusers pass without it)."""
    return f"""EXISTS (
        SELECT 1 FROM {Membership._meta.db_table} m
        WHERE m.project_id = p.id AND m.user_id = {user}
    )"""


_PROJECT_FOR_LABELING_SQL = (
    f"SELECT {select_columns(Project, 'p')} FROM {Project._meta.db_table} p "
    "WHERE p.id = %(project)s {member}"
)
_MEMBER_SQL = f"AND {project_member_sql(user='%(user)s')}"


def project_get_for_labeling(*, user: User | AnonymousUser, project_id: int | str) -> Project:
    """The project if ``user`` may label in it (every member may, whatever the role; a
    superuser may everywhere), else Http404 as in ``project_get_for_member``.

    One plain query instead of two ORM ones (project, then role): the labeling queue calls
    this on every ``next`` and ``prefetch``."""
    if not user.is_authenticated:
        raise Http404("No such project.")
    try:
        project_pk = int(project_id)
    except (ValueError, TypeError):
        raise Http404("No such project.") from None
    sql = _PROJECT_FOR_LABELING_SQL.format(member="" if user.is_superuser else _MEMBER_SQL)
    found = fetch_models(Project, sql, {"project": project_pk, "user": user.pk})
    if not found:
        raise Http404("No such project.")
    return found[0]


def project_resolve(*, ref: str) -> Project:
    """A project by id or by name, for the command line."""
    if ref.isdigit():
        project = Project.objects.filter(pk=int(ref)).first()
        if project is not None:
            return project
    project = Project.objects.filter(name=ref).first()
    if project is None:
        raise Project.DoesNotExist(f"No project with id or name {ref!r}.")
    return project


def user_and_project_for_labeling(*, token_key: str, project_id: int) -> tuple | None:
    """(user, project) for an API token whose active user may label in ``project_id``
    (as ``project_get_for_labeling`` decides), in one query; None otherwise, without
    saying why: the caller then lets the full authentication and lookup answer (401 or
    404). The labeling queue's ``next`` runs this on every request."""
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    width = model_width(user_model)
    with connection.cursor() as cursor:
        cursor.execute(_token_project_sql(), {"key": token_key, "project": project_id})
        row = cursor.fetchone()
    if row is None:
        return None
    return model_from_row(user_model, row[:width]), model_from_row(Project, row[width:])


@functools.cache
def _token_project_sql() -> str:
    """``_TOKEN_PROJECT_SQL`` for the installed user model, built once, not per request."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    user_model = get_user_model()
    return _TOKEN_PROJECT_SQL.format(
        user_columns=select_columns(user_model, "u"),
        user_table=user_model._meta.db_table,
        token_table=Token._meta.db_table,
    )


_TOKEN_PROJECT_SQL = f"""
    SELECT {{user_columns}}, {select_columns(Project, "p")}
    FROM {{token_table}} t
    JOIN {{user_table}} u ON u.id = t.user_id
    JOIN {Project._meta.db_table} p ON p.id = %(project)s
    WHERE t.key = %(key)s AND u.is_active
      AND (u.is_superuser OR {project_member_sql(user="u.id")})
"""
