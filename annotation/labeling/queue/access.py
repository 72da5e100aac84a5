"""Who may label, on the queue's hot path: the user of an API token and the project a
labeler asks for, each in one plain query (``annotation.access`` holds the same
rule for every other request, through the ORM)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser, User
from django.db import connection
from django.http import Http404
from django.utils import timezone

from annotation.api.tokens import api_token_use
from annotation.api_tokens import key_hash, token_read_only, token_refusal, token_use_due
from annotation.labeling.queue.rows import fetch_models, model_from_row, model_width
from annotation.labeling.queue.sql import (
    MEMBER_SQL,
    PROJECT_FOR_LABELING_SQL,
    token_project_sql,
    token_user_sql,
)
from annotation.models import ApiToken, Project


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
    """(user, project) for an API token that may write (``annotation.api_tokens``: a
    full-scope token, unexpired, of an active user whose password has not changed since)
    and whose user may label in ``project_id`` (as ``project_get_for_labeling`` decides),
    in one query; None otherwise, without saying why: the caller then lets the full
    authentication and lookup answer (401, 403 or 404). The labeling queue's ``next``
    runs this on every request."""

    user_model = get_user_model()
    width = model_width(user_model)
    token_end = width + model_width(ApiToken)
    with connection.cursor() as cursor:
        cursor.execute(
            token_project_sql(), {"key_hash": key_hash(token_key), "project": project_id}
        )
        row = cursor.fetchone()
    if row is None:
        return None
    user = model_from_row(user_model, row[:width])
    token = model_from_row(ApiToken, row[width:token_end])
    if not token_writes(token=token, user=user):
        return None
    return user, model_from_row(Project, row[token_end:])


def user_for_token(key: str) -> tuple[Any, ApiToken] | None:
    """(user, token) for an API token key, whether or not the token still works; None if
    no token has that key."""

    user_model = get_user_model()
    width = model_width(user_model)
    with connection.cursor() as cursor:
        cursor.execute(token_user_sql(), [key_hash(key)])
        row = cursor.fetchone()
    if row is None:
        return None
    return model_from_row(user_model, row[:width]), model_from_row(ApiToken, row[width:])


def user_for_writing_token(key: str) -> Any | None:
    """The user of an API token key that may write now (as ``token_writes`` says), else
    None: the queue's submit door."""
    found = user_for_token(key)
    if found is None or not token_writes(token=found[1], user=found[0]):
        return None
    return found[0]


def token_writes(*, token: ApiToken, user: Any) -> bool:
    """Whether ``token`` of ``user`` authenticates a write now; records the use when due
    (``annotation.api_tokens.token_use_due``)."""
    now = timezone.now()
    if token_refusal(token=token, user=user, now=now) is not None:
        return False
    if token_read_only(token=token, method="POST"):
        return False
    if token_use_due(token=token, now=now):
        api_token_use(token=token)
    return True
