"""Export during labeling, small: an export running while annotators claim and submit
gives the very bytes of an export taken before (a snapshot is immutable), holds no
transaction open for long, and costs the annotators no error (issue #6, reliability).

Runs ``bench/bench_export_under_load.py --quick`` (20,000 labels, two annotators on
gunicorn, 3 s windows) on a database of its own beside the suite's. It asserts only the
correctness parts; the throughput ratio is a measurement for BENCHMARKS.md (the full run:
1,000,000 labels), not something a shared CI machine can decide.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "bench" / "bench_export_under_load.py"


def _own_database_url() -> str:
    """Beside the suite's database, named for this test: the script drops and recreates
    it, so it must be neither the test database nor a person's bench."""
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/steplab")
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{parts.path.lstrip('/')}_bench_export_load"))


def test_an_export_during_labeling_is_identical_and_blocks_nothing(tmp_path: Path) -> None:
    # Given a quick run on its own database
    out = tmp_path / "export_under_load.json"

    # When the snapshot is exported back to back while two annotators label
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--quick",
            "--format",
            "prm800k",
            "--database-url",
            _own_database_url(),
            "--out",
            str(out),
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=400,
    )

    # Then every correctness check held and the table was printed
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every export identical to the reference" in result.stdout
    report = json.loads(out.read_text())

    # And at least one export ran during the load and wrote the reference's bytes, every
    # labeled step of the snapshot (PRM800K writes them all)
    assert report["exports"], report["export_failures"]
    assert {e["sha256"] for e in report["exports"]} == {report["reference_export"]["sha256"]}
    assert report["reference_export"]["steps"] == report["snapshot"]["counts"]["steps_labeled"]

    # And annotators labeled in both windows with no error, no chain above its overlap,
    # and no transaction stayed open anywhere near a minute
    for window in ("baseline", "with_export"):
        assert report[window]["pairs"] > 0, report[window]
        assert report[window]["non_2xx"] == 0, report[window]["failures"]
    assert report["integrity"]["chains_over_overlap"] == 0
    assert report["transaction_samples"] > 0
    assert report["max_transaction_s"] < 60
