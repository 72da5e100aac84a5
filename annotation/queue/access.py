"""Who may label, on the queue's hot path: the user of an API token and the project a
labeler asks for, each in one plain query (``annotation.selectors.access`` holds the same
rule for every other request, through the ORM)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.http import Http404

from annotation.models import Project
from annotation.queue.rows import fetch_models, model_from_row, model_width
from annotation.queue.sql import (
    MEMBER_SQL,
    PROJECT_FOR_LABELING_SQL,
    token_project_sql,
    token_user_sql,
)


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
    sql = PROJECT_FOR_LABELING_SQL.format(member="" if user.is_superuser else MEMBER_SQL)
    found = fetch_models(Project, sql, {"project": project_pk, "user": user.pk})
    if not found:
        raise Http404("No such project.")
    return found[0]


def user_and_project_for_labeling(*, token_key: str, project_id: int) -> tuple | None:
    """(user, project) for an API token whose active user may label in ``project_id``
    (as ``project_get_for_labeling`` decides), in one query; None otherwise, without
    saying why: the caller then lets the full authentication and lookup answer (401 or
    404). The labeling queue's ``next`` runs this on every request."""

    user_model = get_user_model()
    width = model_width(user_model)
    with connection.cursor() as cursor:
        cursor.execute(token_project_sql(), {"key": token_key, "project": project_id})
        row = cursor.fetchone()
    if row is None:
        return None
    return model_from_row(user_model, row[:width]), model_from_row(Project, row[width:])


def user_for_token(key: str) -> tuple[Any, Any] | None:
    """(user, token creation time) for an API token key, active or not; None if unknown."""

    with connection.cursor() as cursor:
        cursor.execute(token_user_sql(), [key])
        row = cursor.fetchone()
    if row is None:
        return None
    return model_from_row(get_user_model(), row[:-1]), row[-1]
