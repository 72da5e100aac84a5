"""The A/B runner still runs end to end: HEAD against itself, one round, tiny sizes.

It checks that the script clones, runs each clone's foundation bench, prints its table
and cleans up after itself. It never asserts a speed or a ratio: timings on a shared CI
machine are noise, and the figures are for people.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "bench" / "bench_ab.py"


def _smoke_database_url() -> str:
    """A base name of the smoke test's own, beside the suite's: the runner drops and
    recreates <name>_a and <name>_b, so they must be neither the suite's test database
    nor a person's bench."""
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/steplab")
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{parts.path.lstrip('/')}_bench_ab_smoke"))


def test_bench_ab_one_round_of_head_against_itself_completes(tmp_path: Path) -> None:
    # Given: HEAD as both A and B, one round of a 200-chain bench with 2 clients for 1 s
    out = tmp_path / "ab.json"
    workdir = tmp_path / "work"
    command = [
        sys.executable,
        str(SCRIPT),
        "--a", "HEAD",
        "--b", "HEAD",
        "--rounds", "1",
        "--timeout", "400",
        "--database-url", _smoke_database_url(),
        "--workdir", str(workdir),
        "--json", str(out),
        "--",
        "--chains", "200",
        "--steps", "4",
        "--clients", "2",
        "--seconds", "1",
        "--warmup", "0.3",
    ]  # fmt: skip

    # When: it runs
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=900)

    # Then: both runs completed with no correctness failure and the table was printed
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Steplab A/B of bench/bench_foundation.py" in result.stdout
    for figure in ("pairs/s @2 clients", "next p95 ms @2 clients", "import / COPY"):
        assert f"| {figure} |" in result.stdout
    report = json.loads(out.read_text())
    assert [(run["round"], run["side"], run["returncode"]) for run in report["runs"]] == [
        (1, "A", 0),
        (1, "B", 0),
    ]
    assert report["sides"][0]["sha"] == report["sides"][1]["sha"]
    assert report["figures"]["pairs/s @2 clients"]["n"] == 1
    # And: the clones went with the temporary folder
    assert list(workdir.iterdir()) == []
