"""What a long job of the ML package is doing, for whoever follows it: its phase (loading,
encoding, training, evaluating, scoring, writing...), how far through the phase it is and
in what unit. The package only reports; the caller (a Celery task's service) stores the
reports, at most once a second, works out a rate and an ETA, and reads its cancel flag:
a report callback that raises ``RunCancelled`` stops the job there, between two batches,
with nothing written.

>>> seen = []
>>> meter = PhaseMeter(seen.append)
>>> meter.start("encoding", total=10, unit="steps")
>>> meter.tick(4)
>>> seen[-1]
Phase(name='encoding', done=4, total=10, unit='steps', detail='')
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol


class RunCancelled(Exception):
    """Raised by a report callback (or ``should_stop``): stop now, publish nothing."""


@dataclass(frozen=True)
class Phase:
    name: str  # loading, encoding, training, evaluating, scoring, simulating, writing
    done: int  # units done in this phase
    total: int  # units the phase has; 0 when they are not counted (loading, writing)
    unit: str = ""  # steps, batches, chains, trainings
    detail: str = ""  # e.g. "epoch 3/40", "held-out chains"


PhaseReport = Callable[[Phase], None]


class PhaseMeter:
    """Counts a phase's units and reports each change to ``report`` (None: to no one).
    Cheap enough to tick once per batch."""

    def __init__(self, report: PhaseReport | None) -> None:
        self.report = report
        self.phase = Phase("", 0, 0)

    def start(self, name: str, *, total: int = 0, unit: str = "", detail: str = "") -> None:
        self._emit(Phase(name, 0, max(0, int(total)), unit, detail))

    def tick(self, units: int = 1) -> None:
        """``units`` more done (a batch's steps, one training)."""
        phase = self.phase
        self._emit(
            Phase(phase.name, phase.done + int(units), phase.total, phase.unit, phase.detail)
        )

    def set(self, done: int, *, total: int | None = None, detail: str | None = None) -> None:
        phase = self.phase
        self._emit(
            Phase(
                phase.name,
                int(done),
                phase.total if total is None else int(total),
                phase.unit,
                phase.detail if detail is None else detail,
            )
        )

    def _emit(self, phase: Phase) -> None:
        self.phase = phase
        if self.report is not None:
            self.report(phase)


class _HasSteps(Protocol):
    @property
    def steps(self) -> Sequence[str]: ...


def step_count(chains: Iterable[_HasSteps]) -> int:
    """The steps of the chains (ChainExamples, or anything with ``.steps``)."""
    return sum(len(chain.steps) for chain in chains)
