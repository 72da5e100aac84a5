"""bench/bench_prm_vs_rules.py on a tiny backbone and a slice of ProcessBench: it runs,
pairs every variant with both rules over the seeds, and writes its checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT, require_shared_data
from tests.prm_training.ml_tiny import tiny_backbone_dir

SCRIPT = REPO_ROOT / "bench" / "bench_prm_vs_rules.py"


def test_the_rules_benchmark_pairs_each_variant_with_both_rules(tmp_path: Path) -> None:
    # Given: ProcessBench's GSM8K file, a tiny BERT, two variants and two seeds
    data = require_shared_data() / "processbench" / "gsm8k.json"
    backbone = tiny_backbone_dir(tmp_path, "bert")
    out = tmp_path / "report.json"

    # When
    result = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--data",
            str(data),
            "--chains",
            "200",
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

    # Then: one line per variant and rule, each paired with both rules, and the checks
    assert result.returncode == 0, result.stderr[-3000:]
    names = [line.split()[0] for line in result.stdout.splitlines()[2:]]
    assert names == ["before", "default", "outcome_rule", "position_prior"]
    report = json.loads(out.read_text())
    assert report["seeds"] == 2
    assert [check["metric"] for check in report["checks"]] == [
        "before: F1 vs the outcome rule",
        "before: AUROC vs the outcome rule",
        "default: F1 vs the outcome rule",
        "default: AUROC vs the outcome rule",
    ]
    rule = report["summary"]["outcome_rule"]
    assert rule["step_auroc_vs_outcome_rule"] == "+0.000 ± 0.000"
