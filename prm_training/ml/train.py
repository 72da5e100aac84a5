"""Training a PRM in this process (``launch.train_prm`` chooses how to train and calls it).

Two modes (``PRMConfig.mode``):

* ``frozen_head``: the backbone never changes, so each chain's step representations
  (``model``: the mean of each step's token states and its closing separator's state,
  prefix-only) are computed once and cached (``features``); a round then only trains an
  ensemble of small MLP heads on them and the context features (``inputs``: the step's
  place, the final answer's grade), each head on its own bootstrap resample of the
  chains (Poisson(1) weights per chain). With ``step_prior`` the backbone is a PRM whose
  own step head's log-odds join the features, and the heads start from them
  (``model.EnsembleHead``); the held-out metrics then include the zero-shot prior's.
  With ``zero_shot`` too nothing trains (``zero_shot_prm``): the version is that prior,
  usable before the project has a label.
* ``full``: backbone and heads are fine-tuned together, AdamW with separate learning
  rates, linear warm-up and decay, bf16 autocast on CUDA, float32 on the CPU. With
  ``lora_r`` > 0 the backbone trains LoRA adapters (peft) on every linear layer instead of
  every weight, merged into it at the end; ``gradient_checkpointing`` trades compute for
  activation memory; ``processes`` > 1 trains data-parallel over that many GPUs
  (``launch``, ``ranks``). The backbone's weights load in ``PRMConfig.weights_dtype``.

Targets follow TRL's stepwise convention, one per step on its closing separator; 0
ratings become 1, 0 or no loss by ``PRMConfig.ambiguous``; unrated steps get no loss.

Class imbalance. Most labeled steps are correct (in ProcessBench every step before the
first error is), so a plain loss teaches the head that "correct" is nearly always right and
every P(correct) lands above 0.5: first-error prediction then says "no error" everywhere and
ProcessBench F1 is ~0 however well the steps are ranked. Two documented remedies, both on
by default: the loss weighs the classes equally (``PRMConfig.class_weight``), and the
threshold that turns P(correct) into "first error here" is chosen on the training chains
(``PRMConfig.threshold``; out-of-bag, see ``run_metrics.calibrate_and_readout``), stored in the
checkpoint and used for the held-out metrics; with ``PRMConfig.outcome_readout`` a chain
whose final answer is graded reads its first error with the grade (``metrics.Readout``).
The balanced loss moves P(correct) off the true frequencies; Platt scaling fitted
out-of-bag puts them back (``PRMConfig.calibrate``), so acquisition reads probabilities
that mean what they say (``run_metrics``).

Where the rest lives: ``fine_tune`` (the full-mode loop, LoRA), ``fitting`` (the loss and
the frozen-head loop), ``run_metrics`` (calibration, readout and the run's metrics),
``checkpoint`` (the checkpoint's layout, its writer and its reader).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .baselines import FittedBaselines, fit_rules
from .checkpoint import write_checkpoint
from .config import PRMConfig
from .data import ChainExample, step_target
from .fine_tune import train_full
from .fitting import Reporter, TrainingCancelled, TrainProgress, class_weights, train_frozen_head
from .inputs import CONTEXT_WIDTH, chain_contexts
from .metrics import choose_readout
from .model import (
    EnsembleHead,
    backbone_fingerprint,
    load_configured_backbone,
    resolve_device,
    step_feature_width,
)
from .progress import PhaseMeter, PhaseReport, step_count
from .ranks import barrier, process_group
from .readout import ChainScores, Readout
from .run_metrics import calibrate_and_readout, run_metrics
from .score import LoadedPRM, prior_scores

logger = logging.getLogger(__name__)


@dataclass
class TrainResult:
    checkpoint_dir: str
    metrics: dict[str, float]
    config: dict[str, Any]
    seed: int
    train_chains: int
    heldout_chains: int
    # The held-out chains' scores (empty without held-out metrics): what a comparison with
    # another version on the same chains pairs (``metrics.paired_f1_difference``).
    heldout_scores: list[ChainScores] = field(default_factory=list)
    readout: Readout = field(default_factory=Readout)
    # The held-out figures of the PRM and the baselines with their intervals, and the
    # PRM's paired difference with the strongest baseline (``evaluation.evaluation_report``);
    # None without held-out metrics or baselines.
    report: dict[str, Any] | None = None


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _bootstrap_weights(chains: int, members: int, rng: np.random.Generator) -> np.ndarray:
    """[E, chains] Poisson(1) weights: each member sees its own resample of the chains.
    With one member there is nothing to diversify, so all weights are 1."""
    if members == 1:
        return np.ones((1, chains), dtype=np.float32)
    return rng.poisson(1.0, size=(members, chains)).astype(np.float32)


def fit_baselines(
    config: PRMConfig,
    examples: list[ChainExample],
    targets: list[list[float | None]] | None = None,
    chain_weights: np.ndarray | None = None,
    *,
    answers_correct: Mapping[int, bool | None] | None = None,
) -> FittedBaselines:
    """The baselines (``baselines``) fitted on training chains: the two rules and the
    text-blind head (``text_blind``), trained on the same chains, step targets and
    bootstrap resamples as the PRM (worked out from ``config`` when not given).
    ``answers_correct``: the final answers' grades the rules read, where the caller knows
    them apart from the chains."""
    from .text_blind import fit_text_blind

    if targets is None or chain_weights is None:
        examples, targets = _labeled(config, examples)
        chain_weights = _bootstrap_weights(
            len(examples), config.ensemble_size, np.random.default_rng(config.seed)
        )
    fitted = fit_rules(examples, answers_correct, answer_aware=config.outcome_readout)
    fitted.text_blind = fit_text_blind(config, examples, targets, chain_weights)
    return fitted


def _labeled(
    config: PRMConfig, train: Sequence[ChainExample]
) -> tuple[list[ChainExample], list[list[float | None]]]:
    """The chains with labels and their steps' targets; ValueError when no step carries a
    usable label."""
    examples = [example for example in train if example.labels is not None]
    targets = [
        [step_target(rating, config.ambiguous) for rating in example.labels or ()]
        for example in examples
    ]
    if not any(target is not None for chain in targets for target in chain):
        raise ValueError("no training step has a usable label")
    return examples, targets


def _prm_to_train(config: PRMConfig, device: torch.device) -> LoadedPRM:
    """The version about to be trained: the configured backbone (and step head) on
    ``device`` with a fresh ensemble head; ValueError when ``max_length`` is longer than
    the backbone's positions."""
    tokenizer, backbone, kind, step_head = load_configured_backbone(config, device)
    positions = getattr(backbone.config, "max_position_embeddings", None)
    if isinstance(positions, int) and config.max_length > positions:
        raise ValueError(
            f"max_length {config.max_length} is longer than the backbone's {positions} "
            "positions; choose at most that"
        )
    backbone.to(device)
    if step_head is not None:
        step_head.to(device)
    width = step_feature_width(int(backbone.config.hidden_size), config.step_pooling)
    head = EnsembleHead(
        width,
        config.head_hidden,
        config.ensemble_size,
        config.head_dropout,
        context=CONTEXT_WIDTH if config.context != "none" else 0,
        prior=config.step_prior,
    )
    head.to(device)
    return LoadedPRM(
        config=config,
        tokenizer=tokenizer,
        backbone=backbone,
        head=head,
        kind=kind,
        device=device,
        fingerprint=backbone_fingerprint(config.backbone),
        step_head=step_head,
    )


def _fit(
    prm: LoadedPRM,
    examples: list[ChainExample],
    targets: list[list[float | None]],
    chain_weights: np.ndarray,
    report: Reporter,
) -> float:
    """Train ``prm`` in place: its head on frozen step features, or (full mode) the
    backbone too, which is then the fine-tuned one. The training loss."""
    config = prm.config
    contexts = chain_contexts(examples, config.context)
    weight_by_class = class_weights(targets, config.class_weight)
    if config.mode == "frozen_head":
        prm.backbone.requires_grad_(False)
        return train_frozen_head(
            config=config,
            head=prm.head,
            features=prm.frozen_features(examples),
            contexts=contexts,
            targets=targets,
            chain_weights=chain_weights,
            weight_by_class=weight_by_class,
            device=prm.device,
            report=report,
        )
    train_loss, prm.backbone = train_full(
        config=config,
        backbone=prm.backbone,
        kind=prm.kind,
        head=prm.head,
        tokenizer=prm.tokenizer,
        examples=examples,
        contexts=contexts,
        targets=targets,
        chain_weights=chain_weights,
        weight_by_class=weight_by_class,
        device=prm.device,
        report=report,
    )
    return train_loss


def zero_shot_prm(
    config: PRMConfig,
    train: Sequence[ChainExample],
    heldout: Sequence[ChainExample],
    out_dir: str | Path,
    *,
    should_stop: Callable[[], bool] | None = None,
    phase: PhaseReport | None = None,
) -> TrainResult:
    """A version that trains nothing (``PRMConfig.zero_shot``): every step is scored by the
    backbone's own step head. The checkpoint is an ordinary frozen_head one whose single
    head passes the prior through unchanged (``EnsembleHead.pass_prior_through``), so
    ``load_prm``, ``score_chains`` and the feature cache read it as any other version.

    Labels are optional. The labeled chains of ``train`` choose the readout (as the rules'
    and the zero-shot baseline's are chosen); the labeled ones of ``heldout`` give the
    held-out metrics and the rules' on the same chains. Without labels the readout is P <
    0.5 and the metrics hold ``zero_shot`` (1), the readout, calibration (identity) and
    truncation only. ``phase`` gets the phases (``train_prm``)."""
    config = replace(config, ensemble_size=1)
    if not config.zero_shot:
        raise ValueError("zero_shot_prm needs a config with zero_shot (and step_prior)")
    _seed_everything(config.seed)
    meter = PhaseMeter(phase)
    examples = [example for example in train if example.labels is not None]
    labeled_heldout = [example for example in heldout if example.labels is not None]
    meter.start("loading", detail="the backbone")
    prm = _prm_to_train(config, resolve_device(config.device))
    prm.head.pass_prior_through()
    _encode(prm, [*examples, *labeled_heldout], meter)
    readout = Readout()
    if examples:
        readout = choose_readout(
            examples,
            [s.step_probs for s in prior_scores(examples, prm.frozen_features(examples))],
            answer_aware=config.outcome_readout,
        )
    prm.threshold, prm.threshold_right = readout.threshold, readout.threshold_right
    baselines = None
    if examples:
        labeled, targets = _labeled(config, examples)
        weights = _bootstrap_weights(len(labeled), 1, np.random.default_rng(config.seed))
        baselines = fit_baselines(config, labeled, targets, weights)
    meter.start("evaluating", total=step_count(labeled_heldout), unit="steps", detail="held out")
    metrics, scores, report = run_metrics(
        prm,
        examples,
        labeled_heldout,
        train_loss=None,
        readout=readout,
        baselines=baselines,
        steps_done=meter.tick,
    )
    metrics["zero_shot"] = 1.0
    if should_stop is not None and should_stop():
        raise TrainingCancelled("stopped on request")
    meter.start("writing", detail="the checkpoint")
    return _version_written(
        prm,
        Path(out_dir),
        metrics=metrics,
        train_chains=len(examples),
        heldout_chains=len(labeled_heldout),
        scores=scores,
        readout=readout,
        baselines=baselines,
        report=report,
    )


def _encode(prm: LoadedPRM, chains: Sequence[ChainExample], meter: PhaseMeter) -> None:
    """Every chain's step features into the feature cache, as a phase of its own: the
    longest part of a frozen_head run on a new backbone, counted in steps."""
    meter.start("encoding", total=step_count(chains), unit="steps", detail=f"{len(chains)} chains")
    prm.frozen_features(list(chains), progress=meter.tick)


def _version_written(
    prm: LoadedPRM,
    out: Path,
    *,
    metrics: dict[str, float],
    train_chains: int,
    heldout_chains: int,
    scores: list[ChainScores],
    readout: Readout,
    baselines: FittedBaselines | None,
    report: dict[str, Any] | None,
) -> TrainResult:
    """Write ``prm``'s checkpoint to ``out`` (rank 0 of a process group; the others wait
    until it is in place), with the baselines fitted on its training chains, and return
    what the run produced."""
    if process_group()[0] == 0:
        write_checkpoint(
            out_dir=out,
            config=prm.config,
            kind=prm.kind,
            fingerprint=prm.fingerprint,
            head=prm.head,
            backbone=prm.backbone,
            tokenizer=prm.tokenizer,
            metrics=metrics,
            train_chains=train_chains,
            heldout_chains=heldout_chains,
            baselines=baselines,
        )
    barrier()
    return TrainResult(
        checkpoint_dir=str(out),
        metrics=metrics,
        config=prm.config.to_dict(),
        seed=prm.config.seed,
        train_chains=train_chains,
        heldout_chains=heldout_chains,
        heldout_scores=scores,
        readout=readout,
        report=report,
    )


def train_in_process(
    config: PRMConfig,
    train: Sequence[ChainExample],
    heldout: Sequence[ChainExample],
    out_dir: str | Path,
    *,
    progress: Callable[[TrainProgress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    baselines: bool = True,
    phase: PhaseReport | None = None,
) -> TrainResult:
    """Trains on ``train``, evaluates on ``heldout`` (when ``config.heldout_metrics``), and
    writes the checkpoint directory ``out_dir`` (layout in the module docstring). With
    ``baselines`` (the default) the baselines are fitted on the same chains, scored on
    ``heldout`` beside the PRM and kept in the checkpoint; the simulator, which fits them
    once per seed on its whole pool, turns them off for its rounds.

    ``phase`` gets every phase as it goes (``progress.Phase``): loading the backbone,
    encoding the steps (frozen_head: every chain's, held-out ones too, once), training
    (batches, per epoch), evaluating (the steps scored for calibration and the held-out
    metrics), writing; it may raise ``RunCancelled`` to stop between two batches.

    Raises TrainingCancelled once ``should_stop()`` is true (``PRMConfig.report_every_s``),
    ValueError when no training step has a usable label. Callers start training with
    ``launch.train_prm``, which chooses this, several processes or zero-shot."""
    _seed_everything(config.seed)
    meter = PhaseMeter(phase)
    report = Reporter(config.report_every_s, progress, should_stop, meter)
    examples, targets = _labeled(config, train)
    if should_stop is not None and should_stop():
        raise TrainingCancelled("training stopped on request")

    meter.start("loading", detail="the backbone")
    prm = _prm_to_train(config, resolve_device(config.device))
    if config.mode == "frozen_head":
        _encode(prm, [*examples, *(heldout if config.heldout_metrics else [])], meter)
    chain_weights = _bootstrap_weights(
        len(examples), config.ensemble_size, np.random.default_rng(config.seed)
    )
    epochs = config.head_epochs if config.mode == "frozen_head" else config.epochs
    meter.start("training", unit="batches", detail=f"epoch 1/{epochs}")
    train_loss = _fit(prm, examples, targets, chain_weights, report)
    scored = [*examples, *(heldout if config.heldout_metrics else [])]
    meter.start("evaluating", total=step_count(scored), unit="steps", detail="calibration")
    prm.calibration, readout = calibrate_and_readout(
        prm, examples, targets, chain_weights, steps_done=meter.tick
    )
    prm.threshold, prm.threshold_right = readout.threshold, readout.threshold_right
    fitted = fit_baselines(config, examples, targets, chain_weights) if baselines else None
    meter.set(meter.phase.done, detail="held out")
    metrics, scores, heldout_report = run_metrics(
        prm,
        examples,
        heldout,
        train_loss=train_loss,
        readout=readout,
        baselines=fitted,
        steps_done=meter.tick,
    )
    if should_stop is not None and should_stop():
        raise TrainingCancelled("training stopped on request")

    meter.start("writing", detail="the checkpoint")
    return _version_written(
        prm,
        Path(out_dir),
        metrics=metrics,
        train_chains=len(examples),
        heldout_chains=len(heldout),
        scores=scores,
        readout=readout,
        baselines=fitted,
        report=heldout_report,
    )
