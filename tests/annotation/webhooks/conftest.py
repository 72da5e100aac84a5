"""Fixtures of the webhook tests: a real HTTP receiver on loopback (``receiver``), and real
Celery workers (``hook_workers``: the production workers, ``config.workers``, on the test
broker, against the test database, with retries an hour apart so that none comes during a
test; a backoff is read from the row). Tests that start a worker commit their rows
(``django_db(transaction=True)``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.annotation.webhooks.receiver import Receiver
from tests.prm_training.prm_worker import WorkerFactory, worker_broker_flush, worker_env

RETRY_SECONDS = 3600


@pytest.fixture
def hook_workers(
    transactional_db: Any, settings: Any, tmp_path: Path, import_dir: Path
) -> Iterator[WorkerFactory]:
    """A factory of workers (``start()`` one when the test wants it); all are stopped
    before the database is flushed."""
    env = worker_env(
        settings,
        STEPLAB_IMPORT_DIR=str(import_dir),
        STEPLAB_WEBHOOK_RETRY_SECONDS=",".join([str(RETRY_SECONDS)] * 4),
    )
    factory = WorkerFactory(env=env, tmp=tmp_path)
    try:
        yield factory
    finally:
        factory.stop_all()
        worker_broker_flush(settings)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A receiver, listening; stopped at the end."""
    running = Receiver()
    running.start()
    yield running
    running.stop()
