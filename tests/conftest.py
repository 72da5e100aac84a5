"""Shared fixtures. The suite runs against real PostgreSQL and Redis; with CI=true a
missing service fails the whole run instead of skipping tests."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from rest_framework.test import APIClient

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
IN_CI = os.environ.get("CI", "").lower() == "true"


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def pytest_configure(config: pytest.Config) -> None:
    """With pytest-xdist, the worker processes share the CPUs: each one's torch (and that
    of the Celery workers and children it starts) gets its share of threads, not one per
    CPU, which on 2 CPUs and 2 workers oversubscribed them (tests/prm_training and
    tests/annotation/pages, now the slices' browser tests, on 2 workers, 2026-11-26: 517 s
    with a thread per CPU, 443 s with one each; 618 s on one process). OMP_NUM_THREADS set
    by hand wins."""
    workers = config.getoption("numprocesses", None) or 0
    if workers and not hasattr(config, "workerinput"):  # the controller, before it forks
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, cpus // workers)))


def pytest_sessionstart(session: pytest.Session) -> None:
    missing = [
        name
        for name, port in (("PostgreSQL", 5432), ("Redis", 6379))
        if not _reachable("127.0.0.1", port)
    ]
    if missing and IN_CI:
        pytest.exit(f"CI=true and required services are down: {', '.join(missing)}", returncode=3)
    broker_of_this_worker(session.config)


def broker_of_this_worker(config: pytest.Config) -> None:
    """With pytest-xdist (``-n N``) each worker process gets a Redis database of its own,
    as pytest-django gives it a test database of its own: worker gwK uses the run's
    database number plus K (modulo Redis's 16), so the tests that flush the broker or
    start a Celery worker never take or drop another worker's messages. Set in the
    environment too, for every process a test starts. Nothing changes without xdist."""
    worker = getattr(config, "workerinput", {}).get("workerid", "")
    from django.conf import settings

    url = urlsplit(settings.CELERY_BROKER_URL)
    if not worker.startswith("gw") or url.scheme != "redis":
        return
    if int(worker[2:]) >= 16:
        raise pytest.UsageError("at most 16 xdist workers: one Redis database each")
    database = (int(url.path.strip("/") or 0) + int(worker[2:])) % 16
    own = urlunsplit(url._replace(path=f"/{database}"))
    settings.CELERY_BROKER_URL = own
    os.environ["CELERY_BROKER_URL"] = own


# Above this many rows in all tables together, deleting them row by row costs more than
# PostgreSQL's TRUNCATE (about 23 us a row against 0.2 to 1.7 s for the 51 tables,
# measured on the 2-core development machine, 2026-11-26).
FLUSH_BY_DELETE_MAX_ROWS = 10_000


@pytest.fixture(scope="session", autouse=True)
def flush_by_delete() -> Iterator[None]:
    """After each transactional test (``transaction=True``, ``live_server``) Django
    empties every table with one TRUNCATE, which on PostgreSQL makes new files for each of
    the 51 tables and their indexes whatever they hold: 0.2 to 1.7 s a test, most of the
    teardown of about 200 such tests. When the tables hold few rows they are deleted
    instead, in the flush's one transaction with the foreign keys checked at its end
    (Django declares them DEFERRABLE INITIALLY DEFERRED), so every table is as empty as
    TRUNCATE leaves it (sequences are not reset either way). A flush that resets
    sequences or cascades, or finds many rows, is Django's TRUNCATE."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(
        self: DatabaseOperations,
        style: Any,
        tables: list[str],
        *,
        reset_sequences: bool = False,
        allow_cascade: bool = False,
    ) -> list[str]:
        if tables and not reset_sequences and not allow_cascade:
            names = [self.quote_name(table) for table in tables]
            cap = FLUSH_BY_DELETE_MAX_ROWS + 1
            capped = " UNION ALL ".join(
                f"SELECT count(*) FROM (SELECT 1 FROM {name} LIMIT {cap}) t" for name in names
            )
            with self.connection.cursor() as cursor:
                cursor.execute(
                    "SELECT NOT EXISTS (SELECT 1 FROM pg_constraint "
                    "WHERE contype = 'f' AND NOT condeferrable)"
                )
                all_deferrable = cursor.fetchone()[0]
                cursor.execute(capped)
                rows = sum(count for (count,) in cursor.fetchall())
            if all_deferrable and rows <= FLUSH_BY_DELETE_MAX_ROWS:
                return ["SET CONSTRAINTS ALL DEFERRED;"] + [
                    f"DELETE FROM {name};" for name in names
                ]
        return truncate(
            self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
        )

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DatabaseOperations, "sql_flush", sql_flush)
        yield


def require_shared_data() -> Path:
    """The real public samples beside the repository; CI has them, so there a missing
    folder is a failure, elsewhere a skip."""
    if not SHARED_DATA.is_dir():
        if IN_CI:
            pytest.fail(f"{SHARED_DATA} is missing in CI")
        pytest.skip(f"{SHARED_DATA} not present")
    return SHARED_DATA


@pytest.fixture(autouse=True)
def logging_streams_open() -> None:
    """A handler made while a test captured stderr (logging configured again during that
    test) keeps writing to that capture, which is closed once the test ends; a later
    test's log record then prints "--- Logging error ---" and a traceback into its own
    stderr (the client's tests, which read stderr, failed on it in the full suite). Such
    handlers are pointed back at the live stderr before each test."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in getattr(logger, "handlers", []):
            stream = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and getattr(stream, "closed", False):
                # Not setStream: it flushes the old stream first, which raises once closed.
                with handler.lock or contextlib.nullcontext():
                    handler.stream = sys.stderr


@pytest.fixture(autouse=True)
def import_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where this test's uploads wait for their import job (STEPLAB_IMPORT_DIR): a folder
    of its own, never the checkout's var/imports. Set in the environment too, so the
    worker and child processes a test starts use it."""
    from django.conf import settings

    path = tmp_path_factory.mktemp("imports")
    monkeypatch.setattr(settings, "STEPLAB_IMPORT_DIR", path, raising=False)
    monkeypatch.setenv("STEPLAB_IMPORT_DIR", str(path))
    return path


@pytest.fixture
def shared_data() -> Path:
    return require_shared_data()


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


@pytest.fixture
def project(db):
    from tests.factories import ProjectFactory

    return ProjectFactory()


@pytest.fixture
def make_member(db):
    """make_member(project, role="annotator") -> User, a new user with that role."""
    from tests.factories import MembershipFactory

    def make(project, role: str = "annotator", **user_fields):
        return MembershipFactory(project=project, role=role, **user_fields).user

    return make


@pytest.fixture
def client_for():
    """client_for(user) -> an APIClient authenticated as user (session-free, forced)."""

    def make(user) -> APIClient:
        client = APIClient()
        client.force_authenticate(user=user)
        return client

    return make
