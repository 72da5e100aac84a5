"""Migration 0023 turns each of DRF's tokens (``rest_framework.authtoken``, no longer
installed) into an API token with the same key, so a script keeps working, and deletes
DRF's plain-text keys."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("annotation", "0022_guidelines_rendered")]
AFTER = [("annotation", "0023_api_token")]
KEY = "0123456789abcdef0123456789abcdef01234567"


def migrate(target: list[tuple[str, str]]):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


@pytest.fixture(autouse=True)
def back_to_the_latest_schema():
    yield
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS authtoken_token")
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_drf_tokens_become_api_tokens_with_the_same_key() -> None:
    # Given, before the migration, DRF's token table holding one user's key
    apps = migrate(BEFORE)
    user = apps.get_model("auth", "User").objects.create(username="script", password="x")
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE authtoken_token (key varchar(40) PRIMARY KEY, "
            "created timestamp with time zone NOT NULL, user_id integer NOT NULL UNIQUE)"
        )
        cursor.execute(
            "INSERT INTO authtoken_token VALUES (%s, %s, %s)", [KEY, timezone.now(), user.pk]
        )

    # When the migration runs (and those after it, which the API's models read)
    migrate(AFTER)
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM authtoken_token")
        assert cursor.fetchone()[0] == 0
    latest = MigrationExecutor(connection)
    latest.loader.build_graph()
    migrate(latest.loader.graph.leaf_nodes())

    # Then the key opens the API as before, as a full token, and DRF's copy is gone
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {KEY}")
    assert client.get("/api/v1/projects/").status_code == 200
    from annotation.models import ApiToken

    token = ApiToken.objects.get()
    assert (token.user_id, token.scope, token.prefix) == (user.pk, "full", KEY[:8])
