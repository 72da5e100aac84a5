"""bench/bench_machine_sources.py end to end on a tiny decoder (random words) and a tiny
BERT under the PRM: every source runs on real ProcessBench chains, the table and the JSON
hold a row per source with intervals, and a second run resumes from what the first kept.
The figures mean nothing here; BENCHMARKS.md holds the real model's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT, require_shared_data
from tests.prm_training.ml_tiny import tiny_backbone_dir, tiny_causal_lm_dir

SCRIPT = REPO_ROOT / "bench" / "bench_machine_sources.py"


def _run(lm: Path, bert: Path, out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--data",
            str(require_shared_data() / "processbench" / "gsm8k.json"),
            "--model",
            str(lm),
            "--prm-backbone",
            str(bert),
            "--chains",
            "4",
            "--rollouts",
            "1",
            "--max-new-tokens",
            "6",
            "--judge-tokens",
            "6",
            "--threads",
            "1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_every_source_runs_and_a_second_run_resumes(tmp_path: Path) -> None:
    # Given a tiny causal LM and a tiny BERT
    lm = tiny_causal_lm_dir(tmp_path)
    bert = tiny_backbone_dir(tmp_path, "bert", bert_positions=512)
    out = tmp_path / "sources.json"

    # When the bench runs on four chains
    first = _run(lm, bert, out)

    # Then it ends well, with a row per source and each source's verdict per chain
    assert first.returncode == 0, first.stderr[-3000:]
    report = json.loads(out.read_text())
    assert set(report["sources"]) == {"monte_carlo", "judge", "prm"}
    for source in report["sources"].values():
        assert len(source["verdicts"]) == 4
        assert set(source["figures"]) == {"first_error_accuracy", "processbench_f1", "step_kappa"}
    assert report["chains"] == 4 and report["problems"] >= 1
    for name in ("monte_carlo", "judge", "prm"):
        assert f"| {name} |" in first.stdout

    # When it runs again with the same settings
    second = _run(lm, bert, out)

    # Then every source is taken from what the first run kept, with the same verdicts
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stderr.count("kept from") == 4
    again = json.loads(out.read_text())
    assert {k: v["verdicts"] for k, v in again["sources"].items()} == {
        k: v["verdicts"] for k, v in report["sources"].items()
    }
