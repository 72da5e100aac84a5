"""Shared fixtures. The suite runs against real PostgreSQL and Redis; with CI=true a
missing service fails the whole run instead of skipping tests."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
from pathlib import Path

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


def pytest_sessionstart(session: pytest.Session) -> None:
    missing = [
        name
        for name, port in (("PostgreSQL", 5432), ("Redis", 6379))
        if not _reachable("127.0.0.1", port)
    ]
    if missing and IN_CI:
        pytest.exit(f"CI=true and required services are down: {', '.join(missing)}", returncode=3)


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
