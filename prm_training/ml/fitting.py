"""What every head's training shares: the weighted loss, the loop that fits a head on
frozen step features, the class weights, and the reporter that relays progress and
stops on request. ``train`` trains the PRM with them and ``text_blind`` the text-blind
baseline, so neither imports the other."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .config import PRMConfig
from .model import EnsembleHead
from .progress import PhaseMeter, RunCancelled


class TrainingCancelled(RunCancelled):
    """``should_stop()`` turned true, or a phase report raised; nothing was written at
    ``out_dir``."""


@dataclass
class TrainProgress:
    epoch: int  # 1-based
    step: int  # optimizer steps done, over all epochs
    total_steps: int
    loss: float  # mean loss of this epoch so far
    epochs: int = 0  # epochs in all


class Reporter:
    """Calls progress() and should_stop() at most every ``interval`` seconds and at every
    epoch's end: the callers write to a database. Every step goes to the phase meter
    (whose report throttles itself)."""

    def __init__(
        self,
        interval: float,
        progress: Callable[[TrainProgress], None] | None,
        should_stop: Callable[[], bool] | None,
        meter: PhaseMeter | None = None,
    ) -> None:
        self.interval = interval
        self.progress = progress
        self.should_stop = should_stop
        self.meter = meter or PhaseMeter(None)
        self.last = -math.inf

    def __call__(self, event: TrainProgress, *, force: bool = False) -> None:
        self.meter.set(
            event.step, total=event.total_steps, detail=f"epoch {event.epoch}/{event.epochs}"
        )
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return
        self.last = now
        if self.should_stop is not None and self.should_stop():
            raise TrainingCancelled("training stopped on request")
        if self.progress is not None:
            self.progress(event)


def class_weights(targets: Sequence[Sequence[float | None]], rule: str) -> tuple[float, float]:
    """(weight of a target-0 step, weight of a target-1 step) under ``PRMConfig.class_weight``.
    'balanced' gives both classes the same total weight (scikit-learn's
    n_samples / (n_classes * n_class)); with one class missing, or 'none', both are 1.

    >>> class_weights([[1.0, 1.0, 1.0, 0.0], [None, 1.0]], "balanced")
    (2.5, 0.625)
    """
    flat = [target for chain in targets for target in chain if target is not None]
    positives = sum(1 for target in flat if target >= 0.5)
    negatives = len(flat) - positives
    if rule == "none" or positives == 0 or negatives == 0:
        return 1.0, 1.0
    return len(flat) / (2 * negatives), len(flat) / (2 * positives)


def weighted_bce(
    logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor
) -> torch.Tensor:
    """logits [E, N], targets [N], weights [E, N] -> scalar: each member's weighted mean
    loss, averaged over members."""
    losses = nn.functional.binary_cross_entropy_with_logits(
        logits.float(), targets.expand_as(logits), reduction="none"
    )
    per_member = (losses * weights).sum(dim=1) / weights.sum(dim=1).clamp_min(1e-6)
    return per_member.mean()


def train_frozen_head(
    *,
    config: PRMConfig,
    head: EnsembleHead,
    features: list[np.ndarray],
    contexts: list[np.ndarray],
    targets: list[list[float | None]],
    chain_weights: np.ndarray,
    weight_by_class: tuple[float, float],
    device: torch.device,
    report: Reporter,
) -> float:
    rows: list[np.ndarray] = []
    context_rows: list[np.ndarray] = []
    ys: list[float] = []
    chain_of_row: list[int] = []
    for chain, (chain_features, chain_targets) in enumerate(zip(features, targets, strict=True)):
        keep = [i for i, target in enumerate(chain_targets) if target is not None]
        if keep:
            rows.append(chain_features[keep])
            context_rows.append(contexts[chain][keep])
            ys.extend(chain_targets[i] for i in keep)  # type: ignore[misc]
            chain_of_row.extend([chain] * len(keep))
    x = torch.from_numpy(np.concatenate(rows).astype(np.float32)).to(device)  # [S, H]
    c = torch.from_numpy(np.concatenate(context_rows)).to(device)  # [S, C]
    y = torch.tensor(ys, dtype=torch.float32, device=device)  # [S]
    by_class = torch.where(y >= 0.5, weight_by_class[1], weight_by_class[0])  # [S]
    w = torch.from_numpy(chain_weights[:, chain_of_row]).to(device) * by_class  # [E, S]
    optimizer = torch.optim.AdamW(
        head.parameters(), lr=config.head_learning_rate, weight_decay=config.weight_decay
    )
    generator = torch.Generator().manual_seed(config.seed)
    per_epoch = math.ceil(len(y) / config.head_batch_size)
    total = per_epoch * config.head_epochs
    step = 0
    epoch_loss = math.nan
    head.train()
    for epoch in range(1, config.head_epochs + 1):
        order = torch.randperm(len(y), generator=generator).to(device)
        running, batches = 0.0, 0
        for start in range(0, len(y), config.head_batch_size):
            index = order[start : start + config.head_batch_size]
            loss = weighted_bce(head(x[index], c[index]), y[index], w[:, index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            running, batches = running + loss.item(), batches + 1
            epoch_loss = running / batches
            report(
                TrainProgress(epoch, step, total, epoch_loss, config.head_epochs),
                force=step % per_epoch == 0,
            )
    head.eval()
    return epoch_loss
