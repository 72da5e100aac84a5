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
(``PRMConfig.threshold``; out-of-bag, see ``_calibrate_and_readout``), stored in the
checkpoint and used for the held-out metrics; with ``PRMConfig.outcome_readout`` a chain
whose final answer is graded reads its first error with the grade (``metrics.Readout``).
The balanced loss moves P(correct) off the true frequencies; Platt scaling fitted
out-of-bag puts them back (``PRMConfig.calibrate``), so acquisition reads probabilities
that mean what they say.

Checkpoint layout (a directory; written beside ``out_dir`` under a temporary name and
renamed into place only when complete, so a crash or cancellation never leaves a partial
checkpoint at ``out_dir``; an existing ``out_dir`` is replaced)::

    out_dir/
      config.json        {"format", "prm_config" (PRMConfig as JSON), "seed", "mode",
                          "backbone_kind", "backbone_fingerprint", "head" (shape),
                          "threshold", "threshold_right" (null: the readout
                          ignores answers), "calibration" ([scale, bias]),
                          "train_chains", "heldout_chains"}
      head.safetensors   the ensemble heads' weights
      tokenizer/         the tokenizer (save_pretrained)
      backbone/          the backbone and its tokenizer (save_pretrained): always in
                         "full" mode; in "frozen_head" mode only with save_backbone, else
                         config.json's prm_config.backbone path is used and its
                         fingerprint verified
      metrics.json       held-out metrics (see ``metrics.evaluate``) and train_loss
      baselines.json     the rules fitted on the training chains and their readouts,
      text_blind.*       and the text-blind head (``baselines.load_baselines``), so the
                         version is compared with its own baselines wherever it is scored
"""

from __future__ import annotations

import logging
import math
import os
import random
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .baselines import FittedBaselines, fit_rules, scored_baseline_metrics
from .config import PRMConfig
from .data import (
    ChainExample,
    Window,
    chains_to_windows,
    step_target,
    window_steps,
)
from .features import autocast_for, pad_token_id
from .fitting import (
    Reporter,
    TrainingCancelled,
    TrainProgress,
    class_weights,
    train_frozen_head,
    weighted_bce,
)
from .inputs import CONTEXT_WIDTH, chain_contexts
from .metrics import choose_readout, evaluate, fit_platt
from .model import (
    Backbone,
    EnsembleHead,
    WindowBatch,
    backbone_fingerprint,
    collate_windows,
    encode_steps,
    load_configured_backbone,
    resolve_device,
    save_json,
    step_feature_width,
)
from .progress import PhaseMeter, PhaseReport, step_count
from .ranks import barrier, process_group, rank_share
from .readout import ChainScores, Readout
from .score import LoadedPRM, prior_scores, score_chains, truncation_counts

CHECKPOINT_FORMAT = "steplab-prm/1"
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


def _training_batches(
    windows: list[Window], batch_size: int, generator: torch.Generator
) -> list[list[Window]]:
    """Random batches that still pad little: shuffle, sort within groups of 32 batches by
    length, cut, then shuffle the batches."""
    order = torch.randperm(len(windows), generator=generator).tolist()
    shuffled = [windows[i] for i in order]
    group = batch_size * 32
    batches: list[list[Window]] = []
    for start in range(0, len(shuffled), group):
        chunk = sorted(shuffled[start : start + group], key=lambda window: len(window.input_ids))
        batches.extend(chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size))
    shuffle = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in shuffle]


def _windows_with_labels(
    tokenizer: Any,
    examples: list[ChainExample],
    targets: list[list[float | None]],
    config: PRMConfig,
) -> list[Any]:
    """The chains' windows that hold at least one labeled step (the others teach nothing)."""
    return [
        window
        for window in chains_to_windows(
            tokenizer, examples, config.max_length, config.text_layout()
        )
        if any(
            targets[window.chain_index][window.first_step + i] is not None
            for i in range(len(window.step_end_positions))
        )
    ]


def _optimizer(
    config: PRMConfig, trainable: list[nn.Parameter], head: EnsembleHead, total: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW over the trainable backbone weights and the head (each at its own rate),
    with a linear warmup over the first tenth of ``total`` steps and a linear decay."""
    optimizer = torch.optim.AdamW(
        [
            {"params": trainable, "lr": config.learning_rate},
            {"params": list(head.parameters()), "lr": config.head_learning_rate},
        ],
        weight_decay=config.weight_decay,
    )
    warmup = max(1, total // 10)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: min((step + 1) / warmup, max(0.0, (total - step) / max(1, total - warmup))),
    )
    return optimizer, scheduler


def _batch_targets(
    batch_windows: Sequence[Any], targets: list[list[float | None]]
) -> tuple[list[bool], list[float], list[int]]:
    """For a batch's steps in order: whether each is labeled; the labeled ones' targets
    and their chains' indices."""
    flags: list[bool] = []
    step_targets: list[float] = []
    chains: list[int] = []
    for window in batch_windows:
        for i in range(len(window.step_end_positions)):
            target = targets[window.chain_index][window.first_step + i]
            flags.append(target is not None)
            if target is not None:
                step_targets.append(target)
                chains.append(window.chain_index)
    return flags, step_targets, chains


def _train_full(
    *,
    config: PRMConfig,
    backbone: Backbone,
    kind: str,
    head: EnsembleHead,
    tokenizer: Any,
    examples: list[ChainExample],
    contexts: list[np.ndarray],
    targets: list[list[float | None]],
    chain_weights: np.ndarray,
    weight_by_class: tuple[float, float],
    device: torch.device,
    report: Reporter,
) -> tuple[float, Backbone]:
    """(last epoch's loss, the trained backbone: with LoRA, the adapters merged in)."""
    backbone = _prepare_for_fine_tuning(backbone, config)
    context = torch.from_numpy(np.concatenate(contexts)).to(device)  # [all steps, C]
    starts = np.cumsum([0, *(len(example.steps) for example in examples)]).tolist()
    windows = _windows_with_labels(tokenizer, examples, targets, config)
    trainable = [parameter for parameter in backbone.parameters() if parameter.requires_grad]
    rank, world = process_group()
    scorer: nn.Module = _StepScorer(backbone, head, kind, config.step_pooling)
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel

        # Some backbone weights get no gradient (BERT's pooler): DDP must not wait for them.
        scorer = DistributedDataParallel(
            scorer,
            device_ids=[device.index] if device.type == "cuda" else None,
            find_unused_parameters=True,
        )
    per_epoch = math.ceil(math.ceil(len(windows) / config.batch_size) / world)
    total = per_epoch * config.epochs
    optimizer, scheduler = _optimizer(config, trainable, head, total)
    generator = torch.Generator().manual_seed(config.seed)
    pad_id = pad_token_id(tokenizer)
    step = 0
    epoch_loss = math.nan
    backbone.train()
    head.train()
    for epoch in range(1, config.epochs + 1):
        running, batches = 0.0, 0
        epoch_batches = _training_batches(windows, config.batch_size, generator)
        for batch_windows in rank_share(epoch_batches, rank, world):
            batch = collate_windows(batch_windows, pad_id, device)
            flags, step_targets, chains = _batch_targets(batch_windows, targets)
            labeled = torch.tensor(flags, device=device)
            steps = torch.tensor(window_steps(batch_windows, starts), device=device)  # [N]
            with autocast_for(device):
                logits = scorer(batch, labeled, context[steps[labeled]])  # [E, N_labeled]
            y = torch.tensor(step_targets, dtype=torch.float32, device=device)
            by_class = torch.where(y >= 0.5, weight_by_class[1], weight_by_class[0])
            weights = torch.from_numpy(chain_weights[:, chains]).to(device) * by_class
            loss = weighted_bce(logits, y, weights)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_([*trainable, *head.parameters()], 1.0)
            optimizer.step()
            scheduler.step()
            step += 1
            running, batches = running + loss.item(), batches + 1
            epoch_loss = running / batches
            report(
                TrainProgress(epoch, step, total, epoch_loss, config.epochs),
                force=step % per_epoch == 0,
            )
    head.eval()
    return epoch_loss, _finish_fine_tuning(backbone, config)


class _StepScorer(nn.Module):
    """Backbone and heads as one module, the unit DistributedDataParallel wraps:
    a batch of windows -> [E, N] logits of its labeled steps."""

    def __init__(self, backbone: Backbone, head: EnsembleHead, kind: str, pooling: str) -> None:
        super().__init__()
        self.backbone, self.head, self.kind, self.pooling = backbone, head, kind, pooling

    def forward(
        self, batch: WindowBatch, labeled: torch.Tensor, context: torch.Tensor
    ) -> torch.Tensor:
        hidden = encode_steps(self.backbone, self.kind, batch, self.pooling)  # [N, H]
        return self.head(hidden[labeled], context)  # [E, N_labeled]


def _prepare_for_fine_tuning(backbone: Backbone, config: PRMConfig) -> Backbone:
    """The backbone as 'full' mode trains it: with LoRA adapters on every linear layer
    (``lora_r`` > 0, the other weights frozen) and with gradient checkpointing when asked."""
    if config.gradient_checkpointing:
        # Non-reentrant checkpointing works with frozen inputs (LoRA's frozen embeddings).
        backbone.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False}
        )
    if config.lora_r == 0:
        return backbone
    from peft import LoraConfig, get_peft_model

    # peft annotates lora_alpha as int but scales by lora_alpha / r: a float alpha is used.
    adapters = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,  # type: ignore[arg-type]
        lora_dropout=0.0,
        target_modules="all-linear",
    )
    return get_peft_model(backbone, adapters)


def _finish_fine_tuning(backbone: Backbone, config: PRMConfig) -> Backbone:
    """The trained backbone as a plain transformers model in eval mode: LoRA adapters
    merged into the weights (so saving and loading need no peft), checkpointing off."""
    if config.lora_r:
        backbone = backbone.merge_and_unload()
    if config.gradient_checkpointing:
        backbone.activation_checkpointing_disable()
    return backbone.eval()


def _write_checkpoint(
    *,
    out_dir: Path,
    config: PRMConfig,
    kind: str,
    fingerprint: str,
    head: EnsembleHead,
    backbone: Backbone,
    tokenizer: Any,
    metrics: dict[str, float],
    train_chains: int,
    heldout_chains: int,
    baselines: FittedBaselines | None,
) -> None:
    from safetensors.torch import save_file

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    partial = out_dir.parent / f".{out_dir.name}.partial-{uuid.uuid4().hex}"
    partial.mkdir()
    try:
        save_json(
            partial / "config.json",
            {
                "format": CHECKPOINT_FORMAT,
                "prm_config": config.to_dict(),
                "seed": config.seed,
                "mode": config.mode,
                "backbone_kind": kind,
                "backbone_fingerprint": fingerprint,
                "head": head.describe(),
                "threshold": metrics["threshold"],
                "threshold_right": metrics.get("threshold_right"),
                "calibration": [metrics["calibration_scale"], metrics["calibration_bias"]],
                "train_chains": train_chains,
                "heldout_chains": heldout_chains,
            },
        )
        save_file(
            {name: value.detach().cpu().contiguous() for name, value in head.state_dict().items()},
            str(partial / "head.safetensors"),
        )
        tokenizer.save_pretrained(str(partial / "tokenizer"))
        if config.mode == "full" or config.save_backbone:
            # A whole model directory (with its tokenizer), so a later run can name it as
            # its backbone (``version:<id>``) and go on from these weights.
            backbone.save_pretrained(str(partial / "backbone"))
            tokenizer.save_pretrained(str(partial / "backbone"))
        save_json(partial / "metrics.json", metrics)
        if baselines is not None:
            baselines.save(partial)
        if out_dir.exists():
            # Replace a previous attempt's checkpoint (a redelivered task) in two renames.
            stale = out_dir.parent / f".{out_dir.name}.stale-{uuid.uuid4().hex}"
            os.replace(out_dir, stale)
            os.replace(partial, out_dir)
            shutil.rmtree(stale, ignore_errors=True)
        else:
            os.replace(partial, out_dir)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def _calibrate_and_readout(
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
    train_loss, prm.backbone = _train_full(
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


def _run_metrics(
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
    metrics, scores, report = _run_metrics(
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
        _write_checkpoint(
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
    prm.calibration, readout = _calibrate_and_readout(
        prm, examples, targets, chain_weights, steps_done=meter.tick
    )
    prm.threshold, prm.threshold_right = readout.threshold, readout.threshold_right
    fitted = fit_baselines(config, examples, targets, chain_weights) if baselines else None
    meter.set(meter.phase.done, detail="held out")
    metrics, scores, heldout_report = _run_metrics(
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
