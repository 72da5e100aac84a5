"""A real Celery worker for the import job tests (``test_import_worker.py`` and the import
page's browser test): ``celery -A config worker`` on the test broker, against the test
database, with this test's STEPLAB_IMPORT_DIR. Tests that use it commit their rows
(``django_db(transaction=True)``): the worker is another process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.prm_training.prm_worker import (
    WorkerFactory,
    WorkerHandle,
    worker_broker_flush,
    worker_env,
)


@pytest.fixture
def import_worker(
    transactional_db: Any, settings: Any, tmp_path: Path, import_dir: Path
) -> Iterator[WorkerHandle]:
    """One worker, started and ready; stopped before the database is flushed."""
    env = worker_env(settings, STEPLAB_IMPORT_DIR=str(import_dir))
    factory = WorkerFactory(env=env, tmp=tmp_path)
    try:
        yield factory.start(name="import-worker@%h")
    finally:
        factory.stop_all()
        worker_broker_flush(settings)
