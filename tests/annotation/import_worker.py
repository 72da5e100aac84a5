"""Real Celery workers for the default queue's job tests (imports, bulk actions, and the
import page's browser test): the production workers (``config.workers``) on the test
broker, against the test database, with this test's STEPLAB_IMPORT_DIR; and
``job_wait``, which follows a job's URL until the worker has finished it. Tests that use
it commit their rows (``django_db(transaction=True)``): the worker is another process."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

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
    """A node's workers, started and ready; stopped before the database is flushed."""
    env = worker_env(settings, STEPLAB_IMPORT_DIR=str(import_dir))
    factory = WorkerFactory(env=env, tmp=tmp_path)
    try:
        yield factory.start(name="import-worker@%h")
    finally:
        factory.stop_all()
        worker_broker_flush(settings)


def job_wait(client: APIClient, url: str, worker: WorkerHandle, *, what: str) -> dict[str, Any]:
    """The job at ``url`` once it is done or failed, polled for up to 90 s; the test fails
    with the worker's output when it is not (``what`` names the job)."""
    deadline = time.monotonic() + 90
    job: dict[str, Any] = {}
    while time.monotonic() < deadline:
        job = client.get(url).json()
        if job["status"] in ("done", "failed"):
            return job
        time.sleep(0.2)
    pytest.fail(f"the {what} did not finish: {job}\n{worker.output()[-4000:]}")
