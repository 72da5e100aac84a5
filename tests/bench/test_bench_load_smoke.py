"""The load benchmark still runs end to end and its checks hold: a tiny data set, gunicorn,
a few simulated annotators for a couple of seconds.

It asserts the correctness counts (no lost submit, no chain above its overlap, none leased
twice to one annotator, no 5xx), never a speed: timings on a shared machine are noise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "bench" / "bench_load.py"


def _smoke_database_url() -> str:
    """A database of the smoke test's own: the bench drops and recreates it."""
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/steplab")
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{parts.path.lstrip('/')}_bench_load_smoke"))


def test_load_bench_tiny_run_holds_every_invariant(tmp_path: Path) -> None:
    # Given: 300 chains of 3 steps, overlap 2, and 6 annotators for 2 s; the folder broker
    # (no project retrains automatically, so nothing is enqueued), never a Redis queue a
    # worker of another test could read
    out = tmp_path / "load.json"
    command = [
        sys.executable,
        str(SCRIPT),
        "--chains", "300",
        "--steps", "3",
        "--clients", "6",
        "--seconds", "2",
        "--warmup", "0.3",
        "--database-url", _smoke_database_url(),
        "--broker-url", "",
        "--out", str(out),
    ]  # fmt: skip

    # When: it runs
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)

    # Then: it completed, printed its table, and every correctness count is 0
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Steplab load benchmark" in result.stdout
    for metric in ("requests/s", "next ms p50/p95/p99", "lost submits", "5xx answers"):
        assert metric in result.stdout
    report = json.loads(out.read_text())
    assert report["load"]["pairs"] > 0
    assert report["acknowledged_ids"] >= report["load"]["pairs"]
    assert report["checks"]["lost_submits"] == 0
    assert report["checks"]["chains_above_overlap"] == 0
    assert report["checks"]["chains_leased_twice_to_one_annotator"] == 0
    assert report["checks"]["human_annotations"] == report["acknowledged_ids"]
    assert report["server_errors"] == 0
    assert report["other_failures"] == 0, report["load"]["failures"]
