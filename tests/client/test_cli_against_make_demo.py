"""The installed ``steplab`` against `make demo` itself (the Makefile's command: migrate,
seed_demo, gunicorn and the demo's own Celery workers on a folder broker) on the
PostgreSQL test database: the demo's lead imports a file, which the demo's worker runs,
takes a snapshot and downloads an export; its ML staff start a training run and cancel
it. The other client tests run on pytest-django's live server; this one is the server a
lab starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model

from bench.bench_demo_training import demo_running
from tests.conftest import FIXTURES, IN_CI, REPO_ROOT
from tests.factories import api_token_key

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

STEPLAB = Path(sys.executable).parent / "steplab"
DEMO_PROJECT = "Demo: arithmetic word problems"


@pytest.fixture
def demo_url(transactional_db: Any, settings: Any, tmp_path: Path) -> Iterator[str]:
    """`make demo` on a free port against the test database, its workers on a folder
    broker under ``tmp_path``; its URL once /healthz answers."""
    if not STEPLAB.exists():
        if IN_CI:
            pytest.fail(f"{STEPLAB} is missing: `make install` installs client/")
        pytest.skip("the steplab client is not installed (pip install -e client/)")
    db = settings.DATABASES["default"]
    if db["ENGINE"] != "django.db.backends.postgresql":
        pytest.skip("needs PostgreSQL")
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "MAKE", "CELERY_", "CACHE_URL", "STEPLAB_"))
    }
    env.update(
        PYTHONUNBUFFERED="1",
        STEPLAB_BROKER_DIR=str(tmp_path / "broker"),
        STEPLAB_MODEL_DIR=str(tmp_path / "models"),
        STEPLAB_IMPORT_DIR=str(tmp_path / "imports"),
        DATABASE_URL=f"postgres://{db.get('USER') or 'postgres'}{password}@"
        f"{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{db['NAME']}",
    )
    with demo_running(env, tmp_path / "demo.log") as (port, _):
        yield f"http://127.0.0.1:{port}"


def _steplab(url: str, token: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("STEPLAB_")}
    env.update(STEPLAB_URL=url, STEPLAB_TOKEN=token, STEPLAB_CONFIG="/nonexistent.toml")
    # This checkout's client, wherever the installed one's files are.
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "client"), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [str(STEPLAB), *argv], capture_output=True, text=True, env=env, timeout=300
    )


def test_the_command_line_against_make_demo(demo_url: str, tmp_path: Path) -> None:
    # Given: the demo's lead and ML staff (seed_demo made them), each with a token
    users = get_user_model().objects
    lead = api_token_key(users.get(username="lead"))
    ml = api_token_key(users.get(username="ml"))
    listed = _steplab(demo_url, lead, "projects", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert DEMO_PROJECT in [row["name"] for row in json.loads(listed.stdout)]
    project = DEMO_PROJECT  # named as a person would, not by id

    # When: the lead imports a ProcessBench file and follows the job
    imported = _steplab(
        demo_url, lead, "import", project, str(FIXTURES / "imports" / "processbench_sample.json")
    )

    # Then: the demo's worker ran it
    assert imported.returncode == 0, imported.stderr
    assert "done" in imported.stderr
    assert imported.stdout.startswith("Import ") and " added from processbench_sample.json" in (
        imported.stdout
    )

    # ...a snapshot of every labeled chain, and its TRL export streamed to a file
    taken = _steplab(
        demo_url, lead, "snapshots", "create", project, "--include-imported", "--all-chains"
    )
    assert taken.returncode == 0, taken.stderr
    out = tmp_path / "train.jsonl"
    exported = _steplab(demo_url, lead, "export", project, "--format", "trl", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    assert out.read_text().count("\n") > 0

    # ...ML staff start a training run on the demo's gpu worker and cancel it
    started = _steplab(demo_url, ml, "train", project, "--json")
    assert started.returncode == 0, started.stderr
    run = json.loads(started.stdout)["id"]
    assert _steplab(demo_url, ml, "runs", "cancel", str(run)).returncode == 0
    followed = _steplab(demo_url, ml, "runs", "show", str(run), "--follow")
    assert followed.returncode == 1, followed.stdout
    assert f"training run {run} cancelled" in followed.stderr
