"""The README's non-Docker deployment, for real: `make web`, `make worker` and
`make gpu-worker` against PostgreSQL and Redis, with the production profile.

Given the three processes started as the README says, when the test asks `/healthz`,
calls the API with a token and sends the built-in `steplab.ping` task through each queue,
then the web answers, the `default` worker serves queue `default` and the `gpu` worker
serves queue `gpu`; and all three stop cleanly on SIGTERM. Bounded: every wait has a
deadline and the processes are killed on the way out whatever happens."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

READY_SECONDS = 120
STOP_SECONDS = 60

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.timeout(420)]


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def stop(self) -> int:
        """SIGTERM to what make exec'd (gunicorn, celery), as a supervisor would; make then
        exits with its status. SIGKILL to the whole group only if the shutdown overruns."""
        if self.popen.poll() is None:
            children = child_pids(self.popen.pid) or [self.popen.pid]
            for pid in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
            try:
                self.popen.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait(timeout=30)
        return self.popen.returncode


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc), e.g. the server make started."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Callable[[], bool], *, what: str, processes: list[Process]) -> None:
    deadline = time.monotonic() + READY_SECONDS
    while not predicate():
        for process in processes:
            if process.popen.poll() is not None:
                pytest.fail(f"{process.name} exited early:\n{process.output()[-4000:]}")
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.name}\n{p.output()[-3000:]}" for p in processes)
            pytest.fail(f"timed out waiting for {what}\n{logs}")
        time.sleep(0.3)


def http_get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        body = response.read()
        return response.status, json.loads(body) if body else None
    finally:
        connection.close()


@pytest.fixture
def deployment_env(transactional_db: Any, settings: Any) -> dict[str, str]:
    """The production profile's environment, pointed at pytest's database and the run's
    Redis (flushed first, so no stale message is delivered)."""
    import redis

    db = settings.DATABASES["default"]
    assert db["ENGINE"] == "django.db.backends.postgresql", "needs PostgreSQL"
    broker = settings.CELERY_BROKER_URL
    assert broker.startswith("redis://"), "needs a Redis broker (CELERY_BROKER_URL)"
    redis.Redis.from_url(broker).flushdb()
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    database_url = (
        f"postgres://{db.get('USER') or 'postgres'}{password}@{db.get('HOST') or '127.0.0.1'}"
        f":{db.get('PORT') or 5432}/{db['NAME']}"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "MAKE"))}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings.prod",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            # Plain HTTP on loopback; the HTTPS redirect is tested by `check --deploy`.
            "DJANGO_SECURE_SSL_REDIRECT": "0",
            "DATABASE_URL": database_url,
            "CELERY_BROKER_URL": broker,
            # Results only so this test can read the pings' answers.
            "CELERY_RESULT_BACKEND": broker,
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@pytest.fixture
def start(deployment_env: dict[str, str], tmp_path: Path) -> Iterator[Callable[..., Process]]:
    started: list[Process] = []

    def run(target: str, **make_vars: str) -> Process:
        log = tmp_path / f"{target}.log"
        variables = [f"{key}={value}" for key, value in make_vars.items()]
        with log.open("wb") as out:
            # `-o install`: the suite already runs inside the installed environment.
            popen = subprocess.Popen(
                ["make", "--no-print-directory", "-o", "install", target, *variables],
                cwd=REPO_ROOT,
                env=deployment_env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process = Process(name=target, popen=popen, log=log)
        started.append(process)
        return process

    try:
        yield run
    finally:
        for process in started:
            process.stop()


def test_make_web_worker_and_gpu_worker_serve_their_queues(
    start: Callable[..., Process], deployment_env: dict[str, str], django_user_model: Any
) -> None:
    from celery import Celery

    from tests.factories import api_token_key

    user = django_user_model.objects.create_user(username="deploy-check", password="x" * 12)
    token_key = api_token_key(user)
    port = free_port()

    web = start("web", HOST="127.0.0.1", PORT=str(port), WEB_WORKERS="2")
    worker = start("worker", WORKER_CONCURRENCY="1")
    gpu_worker = start("gpu-worker")
    processes = [web, worker, gpu_worker]

    def web_healthy() -> bool:
        try:
            return http_get(port, "/healthz")[0] == 200
        except OSError:
            return False

    wait_for(web_healthy, what="gunicorn's /healthz", processes=processes)
    status, body = http_get(port, "/healthz")
    assert (status, body) == (200, {"status": "ok", "database": "ok", "broker": "ok"})
    status, body = http_get(port, "/api/v1/projects/", {"Authorization": f"Token {token_key}"})
    assert status == 200 and body["count"] == 0
    assert http_get(port, "/api/v1/projects/")[0] == 401

    for process in (worker, gpu_worker):
        wait_for(lambda p=process: " ready." in p.output(), what=process.name, processes=processes)

    # A bare client app, not the project's: it must not become Celery's current app,
    # which the project's shared tasks resolve to for the rest of the session.
    client = Celery(
        "deploy-check",
        broker=deployment_env["CELERY_BROKER_URL"],
        backend=deployment_env["CELERY_RESULT_BACKEND"],
        set_as_current=False,
    )
    try:
        served = {
            queue: client.send_task("steplab.ping", queue=queue).get(timeout=60)
            for queue in ("default", "gpu")
        }
    finally:
        client.close()
    assert served["default"]["queue"] == "default"
    assert served["default"]["worker"].startswith("default@")
    assert served["gpu"]["queue"] == "gpu"
    assert served["gpu"]["worker"].startswith("gpu@")

    # Clean shutdown: gunicorn and both workers leave with status 0 on SIGTERM.
    for process in processes:
        assert process.stop() == 0, (
            f"{process.name} did not stop cleanly:\n{process.output()[-3000:]}"
        )
    assert "Traceback" not in worker.output() + gpu_worker.output()


def test_sign_in_lockout_holds_across_two_gunicorn_workers(
    start: Callable[..., Process], deployment_env: dict[str, str], django_user_model: Any
) -> None:
    """The sign-in scenario over HTTP: 30 accounts sign in from one address within a
    minute, all succeed; 20 wrong passwords for one account are refused from the limit on,
    on `/login/`, the token endpoint and `/admin/login/`, whichever of two gunicorn workers
    answers (the access log names the worker's pid: both must have served)."""
    import requests
    from django.conf import settings
    from django.contrib.auth.hashers import PBKDF2PasswordHasher

    limit = settings.AXES_FAILURE_LIMIT
    password = "right-password-1"
    # The production profile checks passwords with its own hashers, not the suite's MD5.
    hasher = PBKDF2PasswordHasher()
    hashed = hasher.encode(password, hasher.salt())
    lab = [
        django_user_model.objects.create(username=f"lab-{i}", password=hashed) for i in range(30)
    ]
    targets = {
        entry: django_user_model.objects.create(
            username=f"target-{entry}", password=hashed, is_staff=True
        )
        for entry in ("page", "token", "admin")
    }
    port = free_port()
    deployment_env["GUNICORN_CMD_ARGS"] = "--access-logformat 'pid=%(p)s %(r)s %(s)s'"
    web = start("web", HOST="127.0.0.1", PORT=str(port), WEB_WORKERS="2")

    def web_healthy() -> bool:
        try:
            return http_get(port, "/healthz")[0] == 200
        except OSError:
            return False

    wait_for(web_healthy, what="gunicorn's /healthz", processes=[web])
    base = f"http://127.0.0.1:{port}"

    def form_post(path: str, username: str, secret: str) -> int:
        # A fresh browser each time, and no keep-alive, so each request is accepted anew.
        # The production profile marks the CSRF cookie Secure, which a client sends only
        # over HTTPS, so it goes back by hand on this plain-HTTP loopback.
        close = {"Connection": "close"}
        page = requests.get(base + path, headers=close, timeout=30)
        csrf = page.cookies["csrftoken"]
        response = requests.post(
            base + path,
            data={"username": username, "password": secret, "csrfmiddlewaretoken": csrf},
            cookies={"csrftoken": csrf},
            headers={**close, "Referer": base + path},
            allow_redirects=False,
            timeout=30,
        )
        return response.status_code

    def token_post(username: str, secret: str) -> int:
        return requests.post(
            base + "/api/v1/auth/token/",
            json={"username": username, "password": secret},
            headers={"Connection": "close"},
            timeout=30,
        ).status_code

    # A lab of 30 behind one address signs in through the page and the API.
    assert [form_post("/login/", u.username, password) for u in lab] == [302] * 30
    assert [token_post(u.username, password) for u in lab] == [200] * 30

    attempts: dict[str, Callable[[str, str], int]] = {
        "page": lambda user, secret: form_post("/login/", user, secret),
        "token": token_post,
        "admin": lambda user, secret: form_post("/admin/login/?next=/admin/", user, secret),
    }
    wrong = {"page": 200, "token": 400, "admin": 200}
    for entry, attempt in attempts.items():
        username = targets[entry].username
        codes = [attempt(username, f"guess-{i}") for i in range(20)]
        assert codes == [wrong[entry]] * (limit - 1) + [429] * (21 - limit), entry
        assert attempt(username, password) == 429, entry

    pids = set(re.findall(r"pid=<?(\d+)>? POST ", web.output()))
    assert len(pids) == 2, f"one worker served every sign-in:\n{web.output()[-3000:]}"
    assert web.stop() == 0
