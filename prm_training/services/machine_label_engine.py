"""What a machine-label run's work is handed, whatever its kind: the engine it generates
with, counting completions and tokens (``CountedEngine``), and its progress report
(``WorkReport``: the phase, the counts on the row, the cancel check between items)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prm_training.ml.generation import Completion, SamplingParams
from prm_training.ml.progress import PhaseMeter
from prm_training.models import MachineLabelRun
from prm_training.services.progress import RunProgress

if TYPE_CHECKING:
    from prm_training.ml.generation import GenerationEngine

logger = logging.getLogger(__name__)


@dataclass
class CountedEngine:
    """The engine the run generates with, counting completions and tokens for the row."""

    engine: GenerationEngine
    completions: int = 0
    tokens: int = 0
    model_name: str = ""

    def __post_init__(self) -> None:
        self.model_name = self.engine.model_name

    def __getattr__(self, name: str) -> Any:
        # What else the engine offers (an instruction model's ``chat_prompt``, which the
        # judge looks for) passes through.
        if name == "engine":
            raise AttributeError(name)
        return getattr(self.engine, name)

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        out = self.engine.generate(prompts, params)
        for completions in out:
            self.completions += len(completions)
            self.tokens += sum(completion.tokens for completion in completions)
        return out


class WorkReport:
    """The run's progress: the phase through ``RunProgress`` (rate, ETA, cancel flag),
    the counts on the row's own columns in the same writes."""

    def __init__(self, run: MachineLabelRun, engine: CountedEngine, progress: RunProgress) -> None:
        self.run = run
        self.engine = engine
        self.progress = progress
        self.meter = PhaseMeter(progress)
        self.done = 0

    def start(self, *, done: int, unit: str, detail: str) -> None:
        self.done = done
        self.meter.start("generating", total=self.run.items_total, unit=unit, detail=detail)
        self.meter.set(done)
        self.flush()

    def item_done(self) -> None:
        self.done += 1
        self.progress.note(**self.counts())
        self.meter.set(self.done)

    def check(self) -> None:
        """Raise RunCancelled where the run is to stop (between two items, or two steps)."""
        self.progress.check()

    def flush(self) -> None:
        self.progress.note(**self.counts())
        self.progress.flush()

    def counts(self) -> dict[str, int]:
        return {
            "items_done": self.done,
            "completions": self.run.completions + self.engine.completions,
            "tokens": self.run.tokens + self.engine.tokens,
        }
