"""The attack benchmark still runs end to end: gunicorn, 8 MiB uploads, every attack
answered as expected with less than 1 MiB written. It asserts no speed (the figures are
for people; BENCHMARKS.md records a full run)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.conftest import REPO_ROOT

pytestmark = [pytest.mark.redis, pytest.mark.slow]

SCRIPT = REPO_ROOT / "bench" / "bench_attacks.py"


def test_every_attack_is_refused_and_writes_nothing(tmp_path: Path) -> None:
    # Given: the bench on a database of its own (it drops and recreates it), enqueuing to
    # the run's Redis
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/steplab")
    parts = urlsplit(url)
    database = urlunsplit(parts._replace(path=f"/{parts.path.lstrip('/')}_bench_attacks_smoke"))
    env = {**os.environ, "BENCH_CELERY_BROKER_URL": os.environ.get("CELERY_BROKER_URL", "")}
    out = tmp_path / "attacks.json"
    command = [sys.executable, str(SCRIPT), "--upload-mib", "8", "--database-url", database]
    # When: it runs
    result = subprocess.run(
        [*command, "--out", str(out)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # Then: every attack got its answer with nothing written, and nothing was left behind
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert [c for c in report["checks"] if not c["ok"]] == []
    assert len(report["checks"]) >= 16
    # ...the block Markdown rows among them, alone and in bursts, with /healthz timed
    names = {c["metric"] for c in report["checks"]}
    assert {"preview: 100,000-char table", "preview: 100,000-char nested lists"} <= names
    assert set(report["healthz_seconds_during_bursts"]) == {"table", "lists"}
    # ...the anonymous SAML body, the `[{},...]` body and the template's width, alone and
    # 16 at once, each answered without a session row left behind
    mine = [
        r for r in report["results"] if r["attack"].startswith(("SAML", "token sign-in", "judge"))
    ]
    assert len(mine) == 6 and all(r["rows_stored"] == 0 for r in mine)
    assert report["temporary_files_left"] == []
