"""Acquisition functions: how scored, unlabeled chains become a labeling priority (higher
is sooner). Pure numpy over ``ChainScores``.

* ``random``: uniform scores; the baseline and the guard against a biased selector.
* ``entropy``: mean binary entropy of the steps' P(correct) (mean, not sum, so long chains
  are not preferred just for being long).
* ``first_error_entropy``: entropy of the PRM's distribution over where the first error is,
  P(first error = i) = p_1 ... p_{i-1} (1 - p_i), plus "no error" = p_1 ... p_n; the label
  a first-error annotator produces is exactly this variable.
* ``disagreement``: BALD's mutual information between a step's label and the ensemble
  member, H(mean p) - mean H(p_m), averaged over steps; needs ``member_probs``.
* ``convincing_wrong`` (PRM800K): chains whose final answer is graded wrong against the
  reference, ranked by how highly the PRM rates them (its lowest step probability), come
  first; chains with an ungraded answer next, then graded-right ones, both ranked by step
  entropy, so the score is [2, 3] wrong, [1, 2] unknown, [0, 1] right.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .score import ChainScores

STRATEGIES = ("random", "entropy", "first_error_entropy", "disagreement", "convincing_wrong")
_EPS = 1e-12


def _binary_entropy(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, _EPS, 1 - _EPS)
    return -(p * np.log(p) + (1 - p) * np.log(1 - p))


def step_entropy(step_probs: Sequence[float]) -> float:
    """Mean binary entropy in nats (0 for a chain without steps).

    >>> round(step_entropy([0.5, 1.0]), 4)
    0.3466
    """
    if len(step_probs) == 0:
        return 0.0
    return float(_binary_entropy(np.asarray(step_probs, dtype=np.float64)).mean())


def first_error_distribution(step_probs: Sequence[float]) -> np.ndarray:
    """[n + 1] probabilities: first error at step 0..n-1, then "no error".

    >>> first_error_distribution([0.5, 0.5]).tolist()
    [0.5, 0.25, 0.25]
    """
    p = np.asarray(step_probs, dtype=np.float64)
    survive = np.concatenate([[1.0], np.cumprod(p)])  # P(steps before i all correct)
    return np.concatenate([survive[:-1] * (1 - p), survive[-1:]])


def first_error_entropy(step_probs: Sequence[float]) -> float:
    dist = np.clip(first_error_distribution(step_probs), _EPS, 1.0)
    return float(-(dist * np.log(dist)).sum())


def disagreement(member_probs: Sequence[Sequence[float]]) -> float:
    """Mean over steps of BALD's mutual information (0 when the members agree).

    >>> disagreement([[0.9, 0.5], [0.9, 0.5]])
    0.0
    """
    probs = np.asarray(member_probs, dtype=np.float64)  # [E, n]
    if probs.size == 0:
        return 0.0
    mutual = _binary_entropy(probs.mean(axis=0)) - _binary_entropy(probs).mean(axis=0)
    return float(np.maximum(mutual, 0.0).mean())


def acquisition_scores(
    strategy: str,
    scores: Sequence[ChainScores],
    *,
    answers_correct: Sequence[bool | None] | None = None,
    rng: np.random.Generator,
) -> np.ndarray:
    """[len(scores)] priorities under ``strategy``; higher should be labeled sooner."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {STRATEGIES}")
    n = len(scores)
    if strategy == "random":
        return rng.random(n)
    if strategy == "entropy":
        return np.array([step_entropy(item.step_probs) for item in scores], dtype=np.float64)
    if strategy == "first_error_entropy":
        return np.array([first_error_entropy(item.step_probs) for item in scores], dtype=np.float64)
    if strategy == "disagreement":
        missing = [item.chain_id for item in scores if item.member_probs is None]
        if missing:
            raise ValueError(
                f"'disagreement' needs ensemble member probabilities (ensemble_size > 1); "
                f"chain {missing[0]} has none"
            )
        return np.array(
            [disagreement(item.member_probs or []) for item in scores], dtype=np.float64
        )
    # convincing_wrong
    if answers_correct is None or len(answers_correct) != n:
        raise ValueError("'convincing_wrong' needs answers_correct, one per scored chain")
    out = np.empty(n, dtype=np.float64)
    for index, (item, correct) in enumerate(zip(scores, answers_correct, strict=True)):
        if correct is False:
            out[index] = 2.0 + (min(item.step_probs) if item.step_probs else 0.0)
        else:
            tier = 1.0 if correct is None else 0.0
            out[index] = tier + step_entropy(item.step_probs) / np.log(2)
    return out


def select_batch(
    strategy: str,
    scores: Sequence[ChainScores],
    k: int,
    *,
    random_fraction: float = 0.2,
    answers_correct: Sequence[bool | None] | None = None,
    rng: np.random.Generator,
) -> list[int]:
    """Indices of ``k`` chains to label next: ``round(k * (1 - random_fraction))`` by highest
    acquisition score (ties broken at random), the rest uniformly from the remainder."""
    if not 0.0 <= random_fraction <= 1.0:
        raise ValueError("random_fraction must be within [0, 1]")
    n = len(scores)
    k = max(0, min(k, n))
    if k == 0:
        return []
    by_score = 0 if strategy == "random" else round(k * (1.0 - random_fraction))
    chosen: list[int] = []
    if by_score:
        priority = acquisition_scores(strategy, scores, answers_correct=answers_correct, rng=rng)
        # lexsort's last key is the primary one: priority descending, random tie-break.
        order = np.lexsort((rng.random(n), -priority))
        chosen = [int(i) for i in order[:by_score]]
    taken = set(chosen)
    rest = np.array([i for i in range(n) if i not in taken], dtype=np.int64)
    extra = rng.choice(rest, size=k - len(chosen), replace=False) if k > len(chosen) else []
    return chosen + [int(i) for i in extra]
