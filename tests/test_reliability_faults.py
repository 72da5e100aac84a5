"""PostgreSQL restarted (crash, WAL recovery) under the labeling load loses nothing that
was acknowledged (issue #6, reliability: faults).

Runs ``bench/bench_faults.py --quick`` as CI would: a private PostgreSQL cluster of its
own (never the shared server), gunicorn on loopback, two retrying annotators, a
``pg_ctl restart -m immediate`` 40 % of the way in. Without PostgreSQL's server
binaries the script exits non-zero with a message, and this test fails with it: nothing
is skipped. Only correctness is asserted; the timings are for people (BENCHMARKS.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "bench" / "bench_faults.py"


def test_a_postgresql_crash_during_the_load_loses_no_acknowledged_submit(tmp_path: Path):
    # Given a quick fault run (2,000 chains, 2 annotators, 8 s, restart at 40 %)
    out = tmp_path / "faults.json"

    # When it runs, the cluster crashing and recovering under the load
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--out", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )

    # Then it completed with every check green and printed its table
    assert result.returncode == 0, result.stdout + result.stderr
    assert "lost acknowledged submits" in result.stdout
    report = json.loads(out.read_text())
    load, integrity = report["load"], report["integrity"]

    # And the clients saw the outage, retried, and labeled on both sides of it
    assert sum(load["errors"].values()) > 0, load
    assert load["acks_before"] > 0 and load["acks_after"] > 0, load
    assert load["refused"] == []

    # And the database holds every acknowledged submit exactly once, no chain above its
    # overlap and no annotator twice on a chain
    assert integrity["acknowledged"] == load["pairs"] > 0
    assert integrity["lost_acknowledged"] == 0, integrity["lost_examples"]
    assert integrity["duplicated_acknowledged"] == 0
    assert integrity["annotator_twice_on_a_chain"] == 0
    assert integrity["chains_over_overlap"] == 0
    assert integrity["stored_human_annotations"] == (
        integrity["acknowledged"] + integrity["stored_not_acknowledged"]
    )
