"""Real Celery workers for the tests that need them (this folder's conftest, the import and
webhook tests): started by the production commands (``config.workers``), prefork pool."""

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
    """One node's Celery workers, as production starts them (``config.workers``): the
    ``default`` worker and the ``gpu`` worker, each a ``python -m config.workers NAME``
    subprocess running the prefork pool; ``output()`` is both logs."""

    processes: list[subprocess.Popen[bytes]]
    logs: list[Path]

    @property
    def process(self) -> subprocess.Popen[bytes]:
        """The gpu worker's main process (the one whose node name runs are claimed by)."""
        return self.processes[-1]

    def output(self) -> str:
        return "\n".join(log.read_text(errors="replace") for log in self.logs if log.exists())

    def alive(self) -> bool:
        return all(process.poll() is None for process in self.processes)

    def kill(self) -> None:
        """SIGKILL to every worker's main process (their pool children get SIGKILL from
        Celery's parent-death signal): no warm shutdown, unacknowledged messages stay
        where they are."""
        for process in self.processes:
            process.send_signal(signal.SIGKILL)
        for process in self.processes:
            process.wait(timeout=30)


@dataclass
class WorkerFactory:
    env: dict[str, str]
    tmp: Path
    started: list[WorkerHandle] = field(default_factory=list)

    def start(
        self, *, name: str = "trn-worker@%h", env: dict[str, str] | None = None
    ) -> WorkerHandle:
        """Start a node's two workers by the production commands (``config.workers``) and
        wait until both are ready: the gpu worker named ``name``, the default worker
        ``default-<name>``. ``env`` overrides the environment (e.g. another
        ``CELERY_BROKER_URL``)."""
        processes, logs = [], []
        for kind, hostname in (("default", f"default-{name}"), ("gpu", name)):
            log = self.tmp / f"worker-{len(self.started)}-{kind}.log"
            handle = open(log, "wb")  # noqa: SIM115 - the worker writes to it until it ends
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "config.workers", kind, "--hostname", hostname],
                    cwd=REPO_ROOT,
                    env={**self.env, **(env or {})},
                    stdout=handle,
                    stderr=subprocess.STDOUT,
                )
            )
            logs.append(log)
        worker = WorkerHandle(processes=processes, logs=logs)
        self.started.append(worker)
        deadline = time.monotonic() + WORKER_READY_SECONDS
        while not all(" ready." in log.read_text(errors="replace") for log in logs):
            if not worker.alive():
                raise RuntimeError(f"celery worker exited early:\n{worker.output()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"celery worker not ready:\n{worker.output()}")
            time.sleep(0.2)
        return worker

    def stop_all(self) -> None:
        for worker in self.started:
            for process in worker.processes:
                if process.poll() is None:
                    process.terminate()
            for process in worker.processes:
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=30)


def worker_env(settings: Any, **extra: str) -> dict[str, str]:
    """The environment of a test's worker subprocesses (``WorkerFactory``): the test
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
