"""One real end-to-end run on the bundled all-MiniLM-L6-v2, kept small (< 60 s on a CPU).
Marked slow for selection, but it belongs in CI: it is the only test of the real backbone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from prm_training.ml.checkpoint import load_prm
from prm_training.ml.config import PRMConfig
from prm_training.ml.data import ChainExample
from prm_training.ml.launch import train_prm
from prm_training.ml.score import score_chains
from prm_training.ml.synthetic import synthetic_chains


@pytest.mark.slow
def test_minilm_frozen_head_end_to_end(tmp_path: Path, feature_caches: dict[Any, Any]) -> None:
    # Given: 40 short synthetic chains and the bundled backbone, with a disk cache
    chains = synthetic_chains(40, seed=11, steps=(2, 4), words_per_step=(3, 6))
    config = PRMConfig(
        mode="frozen_head", head_epochs=20, cache_dir=str(tmp_path / "cache"), report_every_s=0.0
    )

    # When: trained on 30 and evaluated on 10
    result = train_prm(config, chains[:30], chains[30:], tmp_path / "v1")

    # Then: a checkpoint with held-out metrics, and a disk cache that a new process reuses
    assert {"step_auroc", "first_error_accuracy", "processbench_f1"} <= set(result.metrics)
    assert list((tmp_path / "cache").rglob("*.npz"))
    feature_caches.clear()
    prm = load_prm(result.checkpoint_dir)
    assert len(prm.cache) == 40  # read back from disk, no backbone pass needed
    scores = list(score_chains(prm, chains[30:]))
    assert [s.chain_id for s in scores] == [c.chain_id for c in chains[30:]]
    assert all(len(s.step_probs) == len(c.steps) for s, c in zip(scores, chains[30:], strict=True))

    # And the prefix property holds on the real encoder with its 4-D step mask
    base = ChainExample(
        100, "what is two plus two", ("two plus two is four", "so the answer is four")
    )
    changed = ChainExample(
        101, base.problem, (base.steps[0], "so the answer is five wrong", "extra step")
    )
    first, second = score_chains(prm, [base, changed])
    np.testing.assert_allclose(first.step_probs[0], second.step_probs[0], atol=1e-4)
    assert first.step_probs[1] != pytest.approx(second.step_probs[1], abs=1e-4)
