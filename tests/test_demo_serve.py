"""`make demo` holds a lab: the same command the Makefile runs (migrate, seed_demo, then
the demo's server), against PostgreSQL, with 16 annotators labeling 1,000 chains at
overlap 2 through the token API (next, then submit) until nothing is left, and no 5xx.

The development server opened a thread and kept a database connection per request, so
PostgreSQL ran out of connections ("too many clients already") and next and submit
answered 500. Bounded: every wait has a deadline, the server is stopped on the way out."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.bench_demo_training import demo_running
from bench.bench_foundation import QueueClient, load_run
from tests.conftest import REPO_ROOT

ANNOTATORS = 16
CHAINS = 1_000
OVERLAP = 2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


class AnnotatorClient(QueueClient):
    """An annotator reads each chain for longer than a keep-alive connection lasts, so
    every next and every submit comes on a new connection, as from a browser."""

    def post(self, path: str, body: dict | None) -> tuple[int, bytes, float]:
        self.conn.close()
        return super().post(path, body)


def _demo_base_env(tmp_path: Path) -> dict[str, str]:
    """`make demo`'s environment with no broker configured (its workers read a folder
    broker, here under ``tmp_path``, as are the checkpoints they write)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "MAKE", "CELERY_", "CACHE_URL", "STEPLAB_"))
    }
    env.update(
        {
            "PYTHONUNBUFFERED": "1",
            "STEPLAB_BROKER_DIR": str(tmp_path / "broker"),
            "STEPLAB_MODEL_DIR": str(tmp_path / "models"),
        }
    )
    return env


@pytest.fixture
def demo_env(transactional_db: Any, settings: Any, tmp_path: Path) -> dict[str, str]:
    """`make demo`'s environment: the development profile, no broker configured, pointed
    at pytest's PostgreSQL database."""
    db = settings.DATABASES["default"]
    assert db["ENGINE"] == "django.db.backends.postgresql", "needs PostgreSQL"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    database_url = (
        f"postgres://{db.get('USER') or 'postgres'}{password}@{db.get('HOST') or '127.0.0.1'}"
        f":{db.get('PORT') or 5432}/{db['NAME']}"
    )
    return {**_demo_base_env(tmp_path), "DATABASE_URL": database_url}


@pytest.fixture
def lab(transactional_db: Any) -> tuple[int, list[str]]:
    """A project of 1,000 generated chains at overlap 2 and 16 annotators with tokens."""
    from django.contrib.auth import get_user_model

    from annotation.datasets.imports import chain_import
    from annotation.demo_data import generate_chains, write_jsonl
    from annotation.models import Role
    from annotation.projects.services import membership_add, project_create
    from tests.factories import api_token_key

    User = get_user_model()
    lead = User.objects.create_user(username="lab-lead", password="x" * 12)
    project = project_create(name="Lab", created_by=lead, overlap=OVERLAP)
    tokens = []
    for i in range(ANNOTATORS):
        user = User.objects.create_user(username=f"lab-annotator-{i}", password="x" * 12)
        membership_add(project=project, user=user, role=Role.ANNOTATOR)
        tokens.append(api_token_key(user))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "lab.jsonl"
        write_jsonl(generate_chains(count=CHAINS, seed=7, error_rate=0.3), path)
        chain_import(project=project, path=path, filename=path.name, fmt="generic", user=lead)
    return project.pk, tokens


@pytest.fixture
def demo(demo_env: dict[str, str], tmp_path: Path) -> Iterator[tuple[int, Path]]:
    log = tmp_path / "demo.log"
    with demo_running(demo_env, log) as (port, _):
        yield port, log


def test_make_demo_on_postgresql_holds_sixteen_annotators(
    lab: tuple[int, list[str]], demo: tuple[int, Path]
) -> None:
    from annotation.models import Chain

    project_id, tokens = lab
    port, log = demo
    # It still prints where to go and who to log in as.
    output = log.read_text()
    assert f"URL: http://127.0.0.1:{port}/" in output
    assert "annotator-demo" in output

    # When: 16 annotators label until the queue has nothing left for any of them
    result = load_run(
        port=port,
        tokens=tokens,
        project_id=project_id,
        seconds=540,
        client_factory=AnnotatorClient,
    )

    # Then: every chain got its two annotations, and no request failed
    assert result["non_2xx"] == 0, result["failures"]
    assert result["empty_queue"] == ANNOTATORS, result
    assert result["submits_ok"] == CHAINS * OVERLAP
    finished = Chain.objects.filter(project_id=project_id, finished_count=OVERLAP).count()
    assert finished == CHAINS


SQLITE_LAB = """
import os
from django.contrib.auth import get_user_model
from tests.factories import api_token_key
from annotation.models import Project, Role
from annotation.projects.services import membership_add
ANNOTATORS = int(os.environ["LAB_ANNOTATORS"])
project = Project.objects.get(name="Demo: arithmetic word problems")
keys = []
for i in range(ANNOTATORS):
    user, _ = get_user_model().objects.get_or_create(username=f"lab-annotator-{i}")
    membership_add(project=project, user=user, role=Role.ANNOTATOR)
    keys.append(api_token_key(user))
ml = get_user_model().objects.get(username="ml")
print("LAB", project.pk, project.overlap, project.chains.count(), ",".join(keys))
print("ML", api_token_key(ml))
"""


def _json_call(port: int, token: str, method: str, path: str) -> tuple[int, dict[str, Any]]:
    import http.client
    import json

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    connection.request(method, path, body=b"{}" if method == "POST" else None, headers=headers)
    response = connection.getresponse()
    payload = json.loads(response.read() or b"{}")
    connection.close()
    return response.status, payload


def _run_until(port: int, token: str, run_id: int, done: Any, seconds: float) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        status, run = _json_call(port, token, "GET", f"/api/v1/training-runs/{run_id}/")
        assert status == 200, run
        if done(run):
            return run
        assert time.monotonic() < deadline, f"the run did not get there in {seconds} s: {run}"
        time.sleep(0.5)


def test_make_demo_on_sqlite_holds_sixteen_annotators(tmp_path: Path) -> None:
    """The embedded default: the demo's own project (200 chains, overlap 2) on a SQLite
    file, 16 annotators writing through the server's threads and processes at once; then
    ML staff start a training run, which the demo's own worker takes (the request only
    queues it), reports its phase, and stops on a cancel."""
    import sqlite3

    database = tmp_path / "demo.sqlite3"
    env = {
        **_demo_base_env(tmp_path),
        "DATABASE_URL": f"sqlite:///{database}",
        "LAB_ANNOTATORS": str(ANNOTATORS),
    }
    log = tmp_path / "demo.log"
    with demo_running(env, log) as (port, _):
        made = subprocess.run(
            [str(REPO_ROOT / ".venv" / "bin" / "python"), "manage.py", "shell", "-c", SQLITE_LAB],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        _, project_id, overlap, chains, keys = next(
            line for line in made.stdout.splitlines() if line.startswith("LAB ")
        ).split()
        ml_key = next(line for line in made.stdout.splitlines() if line.startswith("ML ")).split()[
            1
        ]
        result = load_run(
            port=port,
            tokens=keys.split(","),
            project_id=int(project_id),
            seconds=540,
            client_factory=AnnotatorClient,
        )

        # ML staff start a run: queued by the request, taken by the demo's gpu worker
        status, run = _json_call(
            port, ml_key, "POST", f"/api/v1/projects/{project_id}/training-runs/"
        )
        assert (status, run["status"]) == (201, "queued"), run
        running = _run_until(
            port, ml_key, run["id"], lambda r: r["status"] != "queued" and r["phase"], 300
        )
        assert running["status"] == "running" and running["worker"].startswith("gpu@"), running
        status, _ = _json_call(port, ml_key, "POST", f"/api/v1/training-runs/{run['id']}/cancel/")
        assert status == 200
        stopped = _run_until(port, ml_key, run["id"], lambda r: r["finished_at"], 120)
        assert (stopped["status"], stopped["model_version"]) == ("cancelled", None), stopped
    assert result["non_2xx"] == 0, result["failures"]
    assert result["empty_queue"] == ANNOTATORS, result
    assert result["submits_ok"] == int(chains) * int(overlap)
    with contextlib.closing(sqlite3.connect(database)) as connection:
        unfinished = connection.execute(
            "SELECT count(*) FROM annotation_chain WHERE project_id = ? AND finished_count < ?",
            (int(project_id), int(overlap)),
        ).fetchone()[0]
    assert unfinished == 0
