"""The foundation benchmark still runs end to end: a tiny import, gunicorn, two clients.

It checks that the script completes, prints its table and got no non-2xx answer. It never
asserts a speed: timings on a shared CI machine are noise, and the figures are for people.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "bench" / "bench_foundation.py"


def _smoke_database_url() -> str:
    """A database of the smoke test's own, beside the suite's: the bench drops and
    recreates it, so it must be neither the suite's test database nor a person's bench."""
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/steplab")
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{parts.path.lstrip('/')}_bench_smoke"))


def test_bench_quick_run_completes_and_reports_no_failures(tmp_path: Path) -> None:
    # Given: a small benchmark (200 chains, 1 s, 2 clients) on its own database
    out = tmp_path / "foundation.json"
    command = [
        sys.executable,
        str(SCRIPT),
        "--quick",
        "--chains",
        "200",
        "--steps",
        "4",
        "--clients",
        "2",
        "--seconds",
        "1",
        "--warmup",
        "0.3",
        "--database-url",
        _smoke_database_url(),
        "--out",
        str(out),
    ]

    # When: it runs
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)

    # Then: it completed, printed the table and stored every submit it was told about
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Steplab foundation benchmark" in result.stdout
    for metric in ("import / COPY", "next ms p50/p95/p99 @2 clients", "non-2xx answers"):
        assert metric in result.stdout
    report = json.loads(out.read_text())
    assert report["import"]["steps"] == 200 * 4
    [phase] = report["http"]
    assert phase["clients"] == 2
    assert phase["pairs"] > 0
    assert phase["non_2xx"] == 0, phase["failures"]
    assert phase["warmup"]["non_2xx"] == 0, phase["warmup"]["failures"]
    assert report["integrity"]["human_annotations"] == report["submits_ok_total"]
    assert report["integrity"]["chains_over_overlap"] == 0
