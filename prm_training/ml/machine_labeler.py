"""Machine sources as labelers in the simulator (issue 23): an arm that accepts a source's
labels on a chain where its confidence reaches a threshold (``MachineArm``), the PRM of
the round as such a source (``prm_machine_labels``), and the count of what an arm
accepted against the oracle (``MachineTally``). The protocol is ``simulate``'s."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .readout import Readout, first_error_distribution, labeled_first_error

PRM_SOURCE = "prm"  # the round's own PRM; any other source is read from stored labels
MACHINE_PREFIX = "machine_"


@dataclass(frozen=True)
class MachineArm:
    """Accept a machine source's labels on a chain where its confidence is at least
    ``threshold``; people label the rest (module docstring). ``source``: ``PRM_SOURCE``
    or the name of a stored source (``simulate``'s ``machine_labels``)."""

    source: str
    threshold: float

    def __post_init__(self) -> None:
        if not self.source.isidentifier():
            raise ValueError(f"a machine source is a name, not {self.source!r}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError("a machine arm's threshold must be within [0, 1]")

    @property
    def name(self) -> str:
        """The arm's name in rows and tables.

        >>> MachineArm("prm", 0.9).name
        'machine_prm@0.9'
        """
        return f"{MACHINE_PREFIX}{self.source}@{self.threshold:g}"


# A machine source's answer for one chain: its labels (None where it says nothing) and
# its confidence in them.
MachineLabels = tuple[tuple[int | None, ...], float]


def prm_machine_labels(
    step_probs: Sequence[float], readout: Readout, answer_correct: bool | None
) -> MachineLabels:
    """The PRM as a labeler: its first-error call through ``readout`` (steps before it
    +1, it -1, the rest unlabeled, as first-error labeling leaves them; every step +1 when
    it calls no error), with the probability it gives that call. Where the readout knows
    the answer is wrong (so that an error exists), the probability is conditional on one.

    >>> labels, confidence = prm_machine_labels([0.9, 0.2, 0.5], Readout(0.5), None)
    >>> labels, round(confidence, 3)
    ((1, -1, None), 0.72)
    >>> prm_machine_labels([0.99, 0.98], Readout(0.5), None)[0]
    (1, 1)
    """
    first = readout.first_error(step_probs, answer_correct)
    distribution = first_error_distribution(step_probs)
    confidence = float(distribution[first] if first >= 0 else distribution[-1])
    if first >= 0 and answer_correct is False and readout.threshold_right is not None:
        confidence /= max(1.0 - float(distribution[-1]), 1e-12)
    labels = tuple(
        1 if first == -1 or index < first else (-1 if index == first else None)
        for index in range(len(step_probs))
    )
    return labels, min(confidence, 1.0)


@dataclass
class MachineTally:
    """What a machine arm accepted so far and how much of it the oracle disputes."""

    chains: int = 0
    chain_errors: int = 0
    steps: int = 0
    step_errors: int = 0

    def add(self, machine: Sequence[int | None], oracle: Sequence[int | None] | None) -> None:
        """Counts one accepted chain: its first error against the oracle's (where the
        oracle's labels settle it), and its steps where both give a label.

        >>> tally = MachineTally()
        >>> tally.add((1, -1, None), (1, 1, -1)); tally.add((1, 1), (1, 1))
        >>> tally.chains, tally.chain_errors, tally.steps, tally.step_errors
        (2, 1, 4, 1)
        """
        self.chains += 1
        truth = labeled_first_error(oracle)
        if truth is not None and truth != labeled_first_error(machine):
            self.chain_errors += 1
        for ours, theirs in zip(machine, oracle or (), strict=False):
            if ours is not None and theirs is not None:
                self.steps += 1
                self.step_errors += int(ours != theirs)
