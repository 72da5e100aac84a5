"""bench/bench_prm_vs_rules.py on a tiny backbone and a slice of ProcessBench: it runs,
pairs every variant with the strongest baseline on each figure over the seeds (corrected
intervals), reports F1 per subset, and writes its checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT, require_shared_data
from tests.prm_training.ml_tiny import tiny_backbone_dir

SCRIPT = REPO_ROOT / "bench" / "bench_prm_vs_rules.py"


def test_the_benchmark_pairs_each_variant_with_the_strongest_baseline(tmp_path: Path) -> None:
    # Given: ProcessBench's two files (two subsets), a tiny BERT, two variants, two seeds
    shared = require_shared_data() / "processbench"
    backbone = tiny_backbone_dir(tmp_path, "bert")
    out = tmp_path / "report.json"

    # When
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--data",
            str(shared / "gsm8k.json"),
            str(shared / "math.json"),
            "--chains",
            "150",
            "--seeds",
            "2",
            "--backbone",
            str(backbone),
            "--variant",
            "before=step_pooling:separator,context:none,calibrate:false,max_length:128,outcome_readout:false",
            "--variant",
            "default=head_epochs:3,max_length:128",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO_ROOT,
    )

    # Then: one line per variant and baseline, the F1 of each subset, and the checks of
    # each variant against the strongest baseline of each figure
    assert result.returncode == 0, result.stderr[-3000:]
    header = result.stdout.splitlines()[1].split()
    assert "gsm8k" in header and "math" in header
    names = [line.split()[0] for line in result.stdout.splitlines()[2:]]
    assert names == ["before", "default", "outcome_rule", "position_prior", "text_blind"]
    report = json.loads(out.read_text())
    assert report["seeds"] == 2
    strongest = report["summary"]["strongest"]
    assert set(strongest) == {"mean_subset_f1", "processbench_f1", "step_auroc"}
    assert [check["metric"] for check in report["checks"]] == [
        f"{variant}: {label} vs the strongest baseline ({strongest[key]})"
        for variant in ("before", "default")
        for key, label in (
            ("mean_subset_f1", "sub F1"),
            ("processbench_f1", "F1"),
            ("step_auroc", "AUROC"),
        )
    ]
    best = report["summary"][strongest["step_auroc"]]
    assert best["step_auroc_vs_strongest"] == "+0.000 ± 0.000"
    assert set(best["mean"]) >= {"subset_f1:gsm8k", "subset_f1:math", "mean_subset_f1"}
