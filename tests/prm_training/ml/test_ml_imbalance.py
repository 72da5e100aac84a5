"""Class imbalance: a PRM trained on mostly-correct steps must still call errors. The
balanced loss and the threshold chosen on the training chains (``PRMConfig.class_weight``
and ``PRMConfig.threshold``), on hand-made numbers and on a tiny model."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from prm_training.ml.checkpoint import load_prm
from prm_training.ml.config import PRMConfig
from prm_training.ml.fitting import class_weights
from prm_training.ml.launch import train_prm
from prm_training.ml.metrics import choose_threshold, evaluate
from prm_training.ml.score import score_chains
from prm_training.ml.synthetic import synthetic_chains
from tests.prm_training.ml_tiny import tiny_backbone_dir


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_backbone_dir(tmp_path_factory.mktemp("imbalance-backbone"), "bert")


def _config(backbone: Path, **extra: object) -> PRMConfig:
    return PRMConfig(
        backbone=str(backbone),
        mode="frozen_head",
        head_epochs=15,
        head_hidden=16,
        ensemble_size=4,
        max_length=64,
        device="cpu",
        report_every_s=0.0,
        **extra,  # type: ignore[arg-type]
    )


def test_balanced_class_weights_give_both_classes_the_same_total_weight() -> None:
    targets = [[1.0, 1.0, 1.0, 1.0, 0.0], [1.0, None, 1.0], [1.0, 1.0, 0.0]]
    negative, positive = class_weights(targets, "balanced")
    assert negative * 2 == pytest.approx(positive * 8)  # 2 negatives, 8 positives
    assert negative * 2 + positive * 8 == pytest.approx(10)  # the mean weight stays 1
    assert class_weights(targets, "none") == (1.0, 1.0)
    assert class_weights([[1.0, 1.0]], "balanced") == (1.0, 1.0)  # one class: nothing to do


def test_threshold_is_chosen_for_f1_where_a_fixed_half_calls_no_error_at_all() -> None:
    # Given scores from a head that puts every step above 0.5, yet ranks the errors lowest
    labels = [(1, -1), (1, 1, -1), (1, 1), (1,)]
    probs = [(0.92, 0.71), (0.95, 0.9, 0.6), (0.93, 0.88), (0.97,)]

    # When the threshold is chosen on them
    threshold = choose_threshold(labels, probs)

    # Then at 0.5 no error is found (F1 0), at the chosen threshold every first error is
    # Every threshold in (0.71, 0.88] scores F1 1; ties go to the one nearest 0.5
    assert threshold == pytest.approx(0.72)
    assert choose_threshold(labels, probs, grid=(0.5, 0.8, 0.85)) == 0.8


def test_threshold_falls_back_to_half_when_f1_is_undefined() -> None:
    assert choose_threshold([(1, 1), (1,)], [(0.2, 0.3), (0.4,)]) == 0.5
    assert choose_threshold([(-1,), (1, None)], [(0.2,), (0.9, 0.1)]) == 0.5


def test_balanced_loss_lowers_the_score_of_rare_errors(tiny_bert: Path, tmp_path: Path) -> None:
    # Given chains where few steps are wrong (about 1 in 12)
    chains = synthetic_chains(120, seed=11, error_rate=0.08)
    train, heldout = chains[:90], chains[90:]

    # When the same head is trained with and without class weighting
    scores = {}
    for rule in ("none", "balanced"):
        # The raw heads: calibration would put back the frequencies the loss moved.
        config = _config(tiny_bert, class_weight=rule, calibrate=False)
        result = train_prm(config, train, heldout, tmp_path / rule)
        scores[rule] = list(score_chains(load_prm(result.checkpoint_dir), heldout))

    # Then the wrong steps score lower when both classes weigh the same
    def mean_error_prob(rule: str) -> float:
        return float(
            np.mean(
                [
                    prob
                    for chain, chain_scores in zip(heldout, scores[rule], strict=True)
                    for rating, prob in zip(
                        chain.labels or (), chain_scores.step_probs, strict=True
                    )
                    if rating == -1
                ]
            )
        )

    assert mean_error_prob("balanced") < mean_error_prob("none")


def test_the_chosen_threshold_is_stored_and_used_for_the_heldout_metrics(
    tiny_bert: Path, tmp_path: Path
) -> None:
    chains = synthetic_chains(80, seed=12, error_rate=0.1)
    train, heldout = chains[:60], chains[60:]

    # When trained with the threshold left to training
    result = train_prm(_config(tiny_bert), train, heldout, tmp_path / "auto")

    # Then it is a grid value, stored in the checkpoint, and the stored metrics use it
    threshold = result.metrics["threshold"]
    assert 0.0 < threshold < 1.0 and round(threshold, 2) == threshold
    assert json.loads((tmp_path / "auto" / "config.json").read_text())["threshold"] == threshold
    prm = load_prm(result.checkpoint_dir)
    assert prm.threshold == threshold
    recomputed = evaluate(heldout, list(score_chains(prm, heldout)), prm.threshold)
    for name in ("processbench_f1", "first_error_accuracy", "step_accuracy"):
        assert recomputed[name] == pytest.approx(result.metrics[name])

    # ...and a threshold given in the config is used as given
    fixed = train_prm(replace(_config(tiny_bert), threshold=0.3), train, heldout, tmp_path / "f")
    assert fixed.metrics["threshold"] == 0.3
    assert load_prm(fixed.checkpoint_dir).threshold == 0.3


def test_config_refuses_unknown_class_weight_and_a_threshold_out_of_range() -> None:
    with pytest.raises(ValueError, match="class_weight"):
        PRMConfig(backbone="/x", class_weight="inverse")
    with pytest.raises(ValueError, match="threshold"):
        PRMConfig(backbone="/x", threshold=1.0)
