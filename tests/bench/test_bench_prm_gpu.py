"""bench/bench_prm_gpu.py at its tiny size on the CPU: the GPU node's path (a step-head
PRM built from a config, frozen features against a bare forward, LoRA training) runs end
to end and reports every figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "bench" / "bench_prm_gpu.py"


def test_the_gpu_benchmark_runs_its_three_phases_at_the_tiny_size(tmp_path: Path) -> None:
    out = tmp_path / "prm_gpu.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--size", "tiny", "--chains", "8", "--max-length", "256"]
        + ["--device", "cpu", "--out", str(out)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["tokens"] > 8 * 100 and report["windows"] >= 8
    assert report["features_tokens_per_s"] > 0 and report["bare_tokens_per_s"] > 0
    assert report["lora_steps"] == 2 and report["lora_tokens_per_s"] > 0
    assert report["weights_dtype"] == "float32"  # 'auto' on the CPU
    assert "LoRA r=16 train tokens/s" in result.stdout
