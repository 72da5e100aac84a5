"""A trained run's calibration, readout and metrics: Platt scaling and the first-error
threshold chosen out-of-bag on the training chains, then the held-out figures of the PRM,
its baselines and its zero-shot prior, with the evaluation report's intervals.
``train`` calls ``calibrate_and_readout`` and ``run_metrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .baselines import FittedBaselines, scored_baseline_metrics
from .data import ChainExample
from .metrics import choose_readout, evaluate, fit_platt
from .readout import ChainScores, Readout
from .score import LoadedPRM, prior_scores, score_chains, truncation_counts


def calibrate_and_readout(
    prm: LoadedPRM,
    examples: list[ChainExample],
    targets: list[list[float | None]],
    chain_weights: np.ndarray,
    steps_done: Callable[[int], None] | None = None,
) -> tuple[tuple[float, float], Readout]:
    """(calibration, readout) from the training chains, each scored by the members whose
    bootstrap left it out (weight 0; about 37% of them with Poisson(1) weights), so
    neither is fitted to scores the heads memorised; a chain every member saw, or a single
    head, falls back to all members.

    The calibration (``PRMConfig.calibrate``) is Platt scaling of the out-of-bag mean
    logit against the step targets; the readout is ``choose_readout`` on the calibrated
    probabilities (its threshold ``PRMConfig.threshold`` when set). In frozen_head mode the
    scoring reads the feature cache just filled; in full mode it costs one forward pass."""
    prm.calibration = (1.0, 0.0)
    logits: list[np.ndarray] = []
    scored = score_chains(prm, examples, batch_size=32, steps_done=steps_done)
    for index, chain_scores in enumerate(scored):
        members = np.asarray(chain_scores.member_probs or [chain_scores.step_probs])  # [E, n]
        out_of_bag = chain_weights[:, index] == 0
        if members.shape[0] > 1 and out_of_bag.any():
            members = members[out_of_bag]
        clipped = np.clip(members, 1e-6, 1 - 1e-6)
        logits.append(np.log(clipped / (1 - clipped)).mean(axis=0))
    calibration = (1.0, 0.0)
    if prm.config.calibrate:
        pairs = [
            (logit, target)
            for chain_logits, chain_targets in zip(logits, targets, strict=True)
            for logit, target in zip(chain_logits, chain_targets, strict=True)
            if target is not None
        ]
        calibration = fit_platt([logit for logit, _ in pairs], [target for _, target in pairs])
    scale, bias = calibration
    probs = [(1 / (1 + np.exp(-(scale * chain_logits + bias)))).tolist() for chain_logits in logits]
    readout = choose_readout(
        examples, probs, answer_aware=prm.config.outcome_readout, threshold=prm.config.threshold
    )
    return calibration, readout


# A report's figure -> the run metric's key it is stored beside.
REPORT_KEYS = {"f1": "processbench_f1", "auroc": "step_auroc"}


def _versus_strongest(report: dict[str, Any]) -> dict[str, float]:
    """``vs_strongest_<key>_low``/``_high``: the report's paired interval of the PRM minus
    the strongest baseline, on the figures the verdict reads."""
    out: dict[str, float] = {}
    for figure, key in REPORT_KEYS.items():
        gap = report["versus_strongest"].get(figure)
        if gap is not None and "low" in gap and "high" in gap:
            out[f"vs_strongest_{key}_low"] = gap["low"]
            out[f"vs_strongest_{key}_high"] = gap["high"]
    return out


def _zero_shot_metrics(
    prm: LoadedPRM, train: Sequence[ChainExample], heldout: Sequence[ChainExample]
) -> dict[str, float]:
    """``zero_shot_<metric>``: the backbone's own step scores (``PRMConfig.step_prior``)
    on the held-out chains, read with the readout they score best with on the training
    chains, as the rules are: what the trained heads add to the PRM they start from.
    Both sets' features are in the cache by now."""
    train_scores, heldout_scores = (
        prior_scores(chains, prm.frozen_features(chains)) for chains in (train, heldout)
    )
    readout = choose_readout(
        list(train),
        [scores.step_probs for scores in train_scores],
        answer_aware=prm.config.outcome_readout,
    )
    return {
        f"zero_shot_{metric}": value
        for metric, value in evaluate(heldout, heldout_scores, readout).items()
        if metric in ("processbench_f1", "step_auroc", "first_error_accuracy")
    }


def run_metrics(
    prm: LoadedPRM,
    examples: list[ChainExample],
    heldout: Sequence[ChainExample],
    *,
    train_loss: float | None,
    readout: Readout,
    baselines: FittedBaselines | None,
    steps_done: Callable[[int], None] | None = None,
) -> tuple[dict[str, float], list[ChainScores], dict[str, Any] | None]:
    """The run's metrics (training loss unless nothing trained, readout and calibration,
    truncation, and on ``heldout`` when asked: the PRM's, the baselines' and the zero-shot
    prior's), the held-out chains' scores, and the held-out report with intervals
    (``evaluation.evaluation_report``; None without held-out metrics or baselines)."""
    from .evaluation import evaluation_report

    config = prm.config
    metrics: dict[str, float] = {
        **({"train_loss": float(train_loss)} if train_loss is not None else {}),
        "threshold": readout.threshold,
        **({"threshold_right": readout.threshold_right} if readout.threshold_right else {}),
        "calibration_scale": prm.calibration[0],
        "calibration_bias": prm.calibration[1],
        **truncation_counts(prm.tokenizer, [*examples, *heldout], config),
    }
    scores: list[ChainScores] = []
    report = None
    if heldout and config.heldout_metrics:
        scores = list(score_chains(prm, heldout, batch_size=32, steps_done=steps_done))
        metrics.update(evaluate(heldout, scores, readout))
        labeled = [(e, s) for e, s in zip(heldout, scores, strict=True) if e.labels is not None]
        if baselines is not None and labeled:
            chains = [example for example, _ in labeled]
            metrics.update(scored_baseline_metrics(baselines, chains))
            report = evaluation_report(
                chains,
                {
                    "model": ([s.step_probs for _, s in labeled], readout),
                    **baselines.scorers(chains),
                },
                seed=config.seed,
            )
            metrics.update(_versus_strongest(report))
        if config.step_prior:
            metrics.update(_zero_shot_metrics(prm, examples, heldout))
    return metrics, scores, report
