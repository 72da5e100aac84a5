"""A real Celery worker for the PRM loop tests (used by this folder's conftest and tests)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
WORKER_READY_SECONDS = 90


@dataclass
class WorkerHandle:
    """One ``celery worker`` subprocess; ``log`` collects its output."""

    process: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self) -> None:
        """SIGKILL: no warm shutdown, unacknowledged messages stay where they are."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


@dataclass
class WorkerFactory:
    env: dict[str, str]
    tmp: Path
    started: list[WorkerHandle] = field(default_factory=list)

    def start(
        self, *, name: str = "trn-worker@%h", env: dict[str, str] | None = None
    ) -> WorkerHandle:
        """Start a worker and wait until it is ready; ``env`` overrides the environment
        (e.g. another ``CELERY_BROKER_URL``)."""
        log = self.tmp / f"worker-{len(self.started)}.log"
        handle = open(log, "wb")  # noqa: SIM115 - the worker writes to it until it ends
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-Q",
                "default,gpu",
                "-c",
                "1",
                "--pool=solo",
                "-l",
                "info",
                "-n",
                name,
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
            ],
            cwd=REPO_ROOT,
            env={**self.env, **(env or {})},
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        worker = WorkerHandle(process=process, log=log)
        self.started.append(worker)
        deadline = time.monotonic() + WORKER_READY_SECONDS
        while " ready." not in worker.output():
            if process.poll() is not None:
                raise RuntimeError(f"celery worker exited early:\n{worker.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"celery worker not ready:\n{worker.output()}")
            time.sleep(0.2)
        return worker

    def stop_all(self) -> None:
        for worker in self.started:
            if worker.process.poll() is None:
                worker.process.terminate()
                try:
                    worker.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    worker.kill()


def worker_env(settings: Any, **extra: str) -> dict[str, str]:
    """The environment of a ``celery -A config worker`` subprocess of a test: the test
    database and the run's Redis broker (flushed first, so no stale message is
    delivered), with ``extra`` variables. Skips without PostgreSQL or Redis, except that
    in CI a missing Redis fails (``CI=true``)."""
    import os

    import redis

    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("the worker tests need PostgreSQL")
    broker = settings.CELERY_BROKER_URL
    if not broker.startswith("redis://"):
        pytest.skip("the worker tests need a Redis broker (CELERY_BROKER_URL)")
    try:
        redis.Redis.from_url(broker).flushdb()
    except redis.exceptions.ConnectionError:
        if os.environ.get("CI", "").lower() == "true":
            raise
        pytest.skip("Redis is not running")
    user = db.get("USER") or "postgres"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host = db.get("HOST") or "127.0.0.1"
    port = db.get("PORT") or 5432
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": f"postgres://{user}{password}@{host}:{port}/{db['NAME']}",
        "CELERY_BROKER_URL": broker,
        "PYTHONUNBUFFERED": "1",
        **extra,
    }


def worker_broker_flush(settings: Any) -> None:
    import redis

    redis.Redis.from_url(settings.CELERY_BROKER_URL).flushdb()


def wait_until(
    predicate: Callable[[], bool], *, timeout: float, what: str, diagnose: Callable[[], str]
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}\n{diagnose()}")
        time.sleep(0.25)


@dataclass
class PrivateRedis:
    """A redis-server of this test alone, on a free loopback port, without persistence:
    stopping it is a broker outage that no other test or helper shares."""

    log: Path
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        if not self.port:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.port = probe.getsockname()[1]
        handle = open(self.log, "ab")  # noqa: SIM115 - redis writes to it until it ends
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while not self.reachable():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"redis-server did not start:\n{self.log.read_text()}")
            time.sleep(0.05)

    def reachable(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self.process = None
