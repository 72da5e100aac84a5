"""What the heads read beside a step's representation: its place in the chain and the
chain's final answer graded against the reference (``PRMConfig.context``).

Both are known before anyone labels the chain (the platform holds the reference answers),
so they are inputs, not labels. They let the PRM start from what the model-free outcome
rule knows (``baselines``: a wrong final answer means an error somewhere, most often near
the end) and spend the step representations on where exactly.

Per step, ``CONTEXT_WIDTH`` numbers:

* the final answer: right, wrong, ungraded (one-hot);
* the step's index 0, 1, 2, 3+ (one-hot) and steps after it 0, 1, 2, 3+ (one-hot);
* its relative position i / (n - 1) (0 in a one-step chain) and log(1 + n) / log(64).

Which of them a step sees (``CONTEXTS``):

* ``outcome`` (the default): all of them on every step. A step's score then reads the
  whole chain's outcome and length, not only the problem and the steps up to it: right
  for what the platform does with scores (it scores finished chains to choose which to
  label and where the first error is), wrong for guiding a generator step by step.
* ``prefix``: the step's index on every step, and the answer's grade on the last step
  only (the step that states it), so a step's score depends only on the problem (with
  its reference answer) and the steps up to it: DESIGN.md's invariant 3, for a PRM that
  guides search.
* ``none``: nothing beside the representation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from .config import CONTEXTS
from .data import ChainExample

CONTEXT_WIDTH = 3 + 4 + 4 + 2


def answer_grade(example: ChainExample) -> bool | None:
    """The chain's final answer graded right/wrong: the source's own verdict where it gives
    one (``answer_correct``, e.g. ProcessBench's ``final_answer_correct``), else the answer
    graded against the reference answer, else None."""
    if example.answer_correct is not None:
        return example.answer_correct
    if example.answer and example.reference_answer:
        from .grading import answers_equivalent

        return answers_equivalent(example.answer, example.reference_answer)
    return None


def step_context(n_steps: int, answer_correct: bool | None, context: str = "outcome") -> np.ndarray:
    """[n_steps, CONTEXT_WIDTH] float32 context of a chain's steps (zeros where ``context``
    hides a feature).

    >>> step_context(2, False).astype(float).round(2).tolist()  # doctest: +NORMALIZE_WHITESPACE
    [[0.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.26],
     [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.26]]
    >>> step_context(2, False, "prefix").tolist()  # doctest: +NORMALIZE_WHITESPACE
    [[0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
     [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]
    """
    if context not in CONTEXTS:
        raise ValueError(f"context must be one of {CONTEXTS}, not {context!r}")
    out = np.zeros((n_steps, CONTEXT_WIDTH), dtype=np.float32)
    if n_steps == 0 or context == "none":
        return out
    grade = 0 if answer_correct else 1 if answer_correct is False else 2
    index = np.arange(n_steps)
    out[index, 3 + np.minimum(index, 3)] = 1.0
    if context == "prefix":
        out[n_steps - 1, grade] = 1.0
        return out
    out[:, grade] = 1.0
    out[index, 7 + np.minimum(n_steps - 1 - index, 3)] = 1.0
    out[:, 11] = index / (n_steps - 1) if n_steps > 1 else 0.0
    out[:, 12] = math.log1p(n_steps) / math.log(64)
    return out


def chain_contexts(examples: Sequence[ChainExample], context: str = "outcome") -> list[np.ndarray]:
    """``step_context`` of every chain, in order."""
    return [
        step_context(len(example.steps), answer_grade(example), context) for example in examples
    ]
