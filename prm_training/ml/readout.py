"""How a PRM's step probabilities are read: one chain's scores (``ChainScores``), where its
first error is (labeled, predicted, most likely, the distribution over it) and the
``Readout`` a checkpoint keeps. Torch-free and dependency-free inside ``ml``: acquisition,
metrics and scoring all read it, and it reads none of them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class ChainScores:
    chain_id: int
    step_probs: list[float]  # mean over members of P(step i correct)
    member_probs: list[list[float]] | None  # member_probs[m][i]: member m's P(correct), step i


def labeled_first_error(labels: Sequence[int | None] | None) -> int | None:
    """Index of the first -1 (-1 when the chain has no error), or None when the labels do
    not settle it: the app's "reference" reading (``annotation.first_error``), written
    again here because the ML core imports nothing of the app.

    >>> labeled_first_error((1, 1, -1, None)), labeled_first_error((1, 0, 1))
    (2, -1)
    >>> labeled_first_error((1, None, -1)) is None
    True
    """
    if labels is None:
        return None
    for index, rating in enumerate(labels):
        if rating is None:
            return None
        if rating == -1:
            return index
    return -1


def predicted_first_error(step_probs: Sequence[float], threshold: float = 0.5) -> int:
    """Index of the first step with P(correct) below ``threshold``, or -1 for none.

    >>> predicted_first_error([0.9, 0.4, 0.2]), predicted_first_error([0.9, 0.6])
    (1, -1)
    """
    for index, prob in enumerate(step_probs):
        if prob < threshold:
            return index
    return -1


def first_error_distribution(step_probs: Sequence[float]) -> np.ndarray:
    """[n + 1] probabilities: first error at step 0..n-1, then "no error".

    >>> first_error_distribution([0.5, 0.5]).tolist()
    [0.5, 0.25, 0.25]
    """
    p = np.asarray(step_probs, dtype=np.float64)
    survive = np.concatenate([[1.0], np.cumprod(p)])  # P(steps before i all correct)
    return np.concatenate([survive[:-1] * (1 - p), survive[-1:]])


@dataclass(frozen=True)
class Readout:
    """How a chain's step probabilities become its predicted first error.

    With ``threshold_right`` None, the first step with P(correct) < ``threshold`` (or "no
    error"), whatever the chain. Otherwise the readout also reads the final answer's grade
    (known before labeling, like the reference answer it comes from): a chain graded
    wrong has an error somewhere, so its first error is the most likely one given that
    there is one, argmax_i p_1 ... p_(i-1) (1 - p_i); a chain graded right uses
    ``threshold_right`` (chosen apart: a right answer makes an error less likely); an
    ungraded chain ``threshold``. BENCHMARKS.md ("Figures from the code's comments") has
    what this gains on ProcessBench over the threshold alone, with the same step
    probabilities.

    >>> Readout(0.5, 0.2).first_error([0.9, 0.4, 0.6], False), Readout(0.5, 0.2).first_error(
    ...     [0.9, 0.4, 0.6], True), Readout(0.5).first_error([0.9, 0.4, 0.6], True)
    (1, -1, 1)
    """

    threshold: float = 0.5
    threshold_right: float | None = None

    def first_error(self, step_probs: Sequence[float], answer_correct: bool | None) -> int:
        if self.threshold_right is None or answer_correct is None:
            return predicted_first_error(step_probs, self.threshold)
        if answer_correct:
            return predicted_first_error(step_probs, self.threshold_right)
        return most_likely_first_error(step_probs)


def most_likely_first_error(step_probs: Sequence[float]) -> int:
    """The step most likely to be the first error given that the chain has one:
    argmax_i p_1 ... p_(i-1) (1 - p_i) (-1 for a chain without steps).

    >>> most_likely_first_error([0.9, 0.6, 0.1]), most_likely_first_error([0.3, 0.5])
    (2, 0)
    """
    if len(step_probs) == 0:
        return -1
    return int(np.argmax(first_error_distribution(step_probs)[:-1]))  # "no error" left out


def step_verdicts(
    step_probs: Sequence[float], readout: Readout, answer_correct: bool | None = None
) -> list[int]:
    """Each step's verdict, +1 (correct) or -1, as ``readout`` reads the chain: its first
    error (``Readout.first_error``, the reading the version's F1 measures) is -1 and every
    step before it +1; a step after it is -1 where P(correct) is below the threshold the
    readout applies to the chain (``threshold_right`` for a chain graded right, else
    ``threshold``), else +1. ``answer_correct`` is read only where the readout reads
    answers.

    >>> step_verdicts([0.9, 0.4, 0.8, 0.2], Readout(0.5))
    [1, -1, 1, -1]
    >>> step_verdicts([0.3, 0.9, 0.1], Readout(0.5, 0.2), True)
    [1, 1, -1]
    >>> step_verdicts([0.6, 0.9, 0.1], Readout(0.5, 0.2), False), step_verdicts([], Readout())
    ([1, 1, -1], [])
    """
    first = readout.first_error(step_probs, answer_correct)
    threshold = readout.threshold
    if readout.threshold_right is not None and answer_correct:
        threshold = readout.threshold_right
    verdicts = []
    for index, p in enumerate(step_probs):
        if first == -1 or index < first:
            verdicts.append(1)
        elif index == first:
            verdicts.append(-1)
        else:
            verdicts.append(1 if p >= threshold else -1)
    return verdicts
