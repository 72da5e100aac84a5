"""Full mode (``PRMConfig.mode == "full"``): backbone and heads fine-tuned together.

AdamW with separate learning rates, linear warm-up and decay, bf16 autocast on CUDA; with
``lora_r`` > 0 LoRA adapters (peft) on every linear layer, merged into the backbone at the
end; data-parallel over a process group (``ranks``) when there is one. ``train`` calls
``train_full``; the frozen-head loop is in ``fitting``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from .config import PRMConfig
from .data import ChainExample, Window, chains_to_windows, window_steps
from .features import autocast_for, pad_token_id
from .fitting import Reporter, TrainProgress, weighted_bce
from .model import Backbone, EnsembleHead, WindowBatch, collate_windows, encode_steps
from .ranks import process_group, rank_share


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


def train_full(
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
