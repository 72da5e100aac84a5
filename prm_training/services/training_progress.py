"""What a training run reports while it trains: the phase report handed to ``train_prm``
with its progress callback (the steps' share, the loss curve kept thinned) and its
cancel check."""

from __future__ import annotations

import logging
import math
from typing import Any

from prm_training.models import TrainingRun
from prm_training.services.progress import RunProgress

logger = logging.getLogger(__name__)


LOSS_HISTORY_MAX = 500


class TrainingReporter(RunProgress):
    """The phase report handed to ``train_prm`` (``progress.RunProgress``), with its
    ``progress`` callback (the training steps' share and the loss, written with the next
    phase write) and ``should_stop`` (the cancel flag, read once a second)."""

    def __init__(self, run: TrainingRun, *, span: float = 1.0) -> None:
        super().__init__(run)
        self.span = span
        self.losses: list[float] = []

    def progress(self, event: Any) -> None:
        loss = _progress_loss(event)
        if loss is not None and math.isfinite(loss):
            self.losses.append(float(loss))
        fraction = _progress_fraction(event)
        if fraction is not None:
            self.note(progress=min(1.0, max(0.0, self.span * float(fraction))))
        if self.losses:
            self.note(last_loss=self.losses[-1], loss_history=thin(self.losses, LOSS_HISTORY_MAX))

    def should_stop(self) -> bool:
        return self.stop_requested()


def thin(values: list[float], limit: int) -> list[float]:
    """At most ``limit`` values spread evenly over ``values``, keeping the last one."""
    if len(values) <= limit:
        return list(values)
    stride = len(values) / limit
    picked = [values[int(i * stride)] for i in range(limit - 1)]
    return [*picked, values[-1]]


def _progress_fraction(event: Any) -> float | None:
    fraction = getattr(event, "fraction", None)
    if fraction is not None:
        return float(fraction)
    step, total = getattr(event, "step", None), getattr(event, "total_steps", None)
    if step is not None and total:
        return float(step) / float(total)
    return None


def _progress_loss(event: Any) -> float | None:
    loss = getattr(event, "loss", None)
    return float(loss) if loss is not None else None
