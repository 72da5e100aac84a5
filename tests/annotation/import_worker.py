"""A real Celery worker for the import job tests (``test_import_worker.py`` and the import
page's browser test): ``celery -A config worker`` on the test broker, against the test
database, with this test's STEPLAB_IMPORT_DIR. Tests that use it commit their rows
(``django_db(transaction=True)``): the worker is another process."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.prm_training.prm_worker import WorkerFactory, WorkerHandle


@pytest.fixture
def import_worker(
    transactional_db: Any, settings: Any, tmp_path: Path, import_dir: Path
) -> Iterator[WorkerHandle]:
    """One worker, started and ready; stopped before the database is flushed."""
    import redis

    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("the worker tests need PostgreSQL")
    broker = settings.CELERY_BROKER_URL
    if not broker.startswith("redis://"):
        pytest.skip("the worker tests need a Redis broker (CELERY_BROKER_URL)")
    try:
        redis.Redis.from_url(broker).flushdb()  # no stale message is delivered
    except redis.exceptions.ConnectionError:
        if os.environ.get("CI", "").lower() == "true":
            raise
        pytest.skip("Redis is not running")
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": f"postgres://{user}{password}@{host}:{port}/{db['NAME']}",
        "CELERY_BROKER_URL": broker,
        "STEPLAB_IMPORT_DIR": str(import_dir),
        "PYTHONUNBUFFERED": "1",
    }
    factory = WorkerFactory(env=env, tmp=tmp_path)
    try:
        yield factory.start(name="import-worker@%h")
    finally:
        factory.stop_all()
        redis.Redis.from_url(broker).flushdb()
