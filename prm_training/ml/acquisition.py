"""Acquisition functions: how scored, unlabeled chains become a labeling priority (higher
is sooner). Pure numpy over ``ChainScores``.

What a label costs and what it reveals depend on the labeling mode. Under first-error
labeling (``first_error_labeling``) an annotator rates steps up to the first wrong one and
stops: step i is rated only if every step before it is correct, with probability
r_i = p_1 ... p_{i-1} under the PRM, and the chain costs E[rated steps] = sum r_i. So the
step-level strategies weigh each step by r_i (a step after the predicted first error
tells nothing, because nobody will rate it) and every strategy is per expected rated
step, so long chains are not preferred for being long. Under all-steps labeling r_i = 1:
every step is rated.

* ``random``: uniform scores; the baseline and the guard against a biased selector.
* ``entropy``: binary entropy of the steps' P(correct), averaged over the steps that
  would be rated (weights r_i).
* ``first_error_entropy``: entropy of the PRM's distribution over where the first error is,
  P(first error = i) = p_1 ... p_{i-1} (1 - p_i), plus "no error" = p_1 ... p_n (the label
  a first-error annotator produces is exactly this variable), per expected rated step.
* ``disagreement``: BALD's mutual information between a step's label and the ensemble
  member, H(mean p) - mean H(p_m), averaged over the steps that would be rated; needs
  ``member_probs``.
* ``convincing_wrong`` (PRM800K): chains whose final answer is graded wrong against the
  reference, ranked by how highly the PRM rates them (its lowest step probability), come
  first; chains with an ungraded answer next, then graded-right ones, both ranked by step
  entropy, so the score is [2, 3] wrong, [1, 2] unknown, [0, 1] right.

Diversity (``spread_over_groups``): chains of the same problem are near-duplicates to a
PRM (the same question, often the same first steps), so a batch of the top scores tends
to spend its labels on a few problems. Ranked model-driven picks therefore take every
problem's best chain before any problem's second one.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from .readout import ChainScores, first_error_distribution

STRATEGIES = ("random", "entropy", "first_error_entropy", "disagreement", "convincing_wrong")
_EPS = 1e-12


def _binary_entropy(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, _EPS, 1 - _EPS)
    return -(p * np.log(p) + (1 - p) * np.log(1 - p))


def rated_weights(
    step_probs: Sequence[float] | np.ndarray, first_error_labeling: bool
) -> np.ndarray:
    """[n] the probability that each step gets rated: r_i = p_1 ... p_{i-1} under
    first-error labeling, 1 otherwise.

    >>> rated_weights([0.5, 0.5, 0.5], True).tolist(), rated_weights([0.5], False).tolist()
    ([1.0, 0.5, 0.25], [1.0])
    """
    p = np.asarray(step_probs, dtype=np.float64)
    if not first_error_labeling:
        return np.ones_like(p)
    return np.concatenate([[1.0], np.cumprod(p)[:-1]]) if p.size else p


def _rated_mean(values: np.ndarray, weights: np.ndarray) -> float:
    total = weights.sum()
    return float((values * weights).sum() / total) if total > 0 else 0.0


def step_entropy(step_probs: Sequence[float], first_error_labeling: bool = False) -> float:
    """Binary entropy in nats averaged over the steps that would be rated (0 for a chain
    without steps).

    >>> round(step_entropy([0.5, 1.0]), 4), round(step_entropy([0.01, 0.5], True), 4)
    (0.3466, 0.0623)
    """
    if len(step_probs) == 0:
        return 0.0
    p = np.asarray(step_probs, dtype=np.float64)
    return _rated_mean(_binary_entropy(p), rated_weights(p, first_error_labeling))


def first_error_entropy(step_probs: Sequence[float], first_error_labeling: bool = False) -> float:
    """Entropy of where the first error is, per expected rated step.

    >>> round(first_error_entropy([0.5, 0.5]), 4), round(first_error_entropy([0.5, 0.5], True), 4)
    (0.5199, 0.6931)
    """
    if len(step_probs) == 0:
        return 0.0
    dist = np.clip(first_error_distribution(step_probs), _EPS, 1.0)
    cost = rated_weights(step_probs, first_error_labeling).sum()
    return float(-(dist * np.log(dist)).sum() / cost)


def disagreement(
    member_probs: Sequence[Sequence[float]], first_error_labeling: bool = False
) -> float:
    """BALD's mutual information averaged over the steps that would be rated (0 when the
    members agree); r_i from the members' mean.

    >>> disagreement([[0.9, 0.5], [0.9, 0.5]])
    0.0
    """
    probs = np.asarray(member_probs, dtype=np.float64)  # [E, n]
    if probs.size == 0:
        return 0.0
    mean = probs.mean(axis=0)
    mutual = np.maximum(_binary_entropy(mean) - _binary_entropy(probs).mean(axis=0), 0.0)
    return _rated_mean(mutual, rated_weights(mean, first_error_labeling))


def acquisition_scores(
    strategy: str,
    scores: Sequence[ChainScores],
    *,
    answers_correct: Sequence[bool | None] | None = None,
    first_error_labeling: bool = False,
    rng: np.random.Generator,
) -> np.ndarray:
    """[len(scores)] priorities under ``strategy``; higher should be labeled sooner.
    ``first_error_labeling``: annotators stop at the first wrong step (module docstring)."""
    mode = first_error_labeling
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose from {STRATEGIES}")
    n = len(scores)
    if strategy == "random":
        return rng.random(n)
    if strategy == "entropy":
        return np.array([step_entropy(item.step_probs, mode) for item in scores], np.float64)
    if strategy == "first_error_entropy":
        return np.array([first_error_entropy(item.step_probs, mode) for item in scores], np.float64)
    if strategy == "disagreement":
        missing = [item.chain_id for item in scores if item.member_probs is None]
        if missing:
            raise ValueError(
                f"'disagreement' needs ensemble member probabilities (ensemble_size > 1); "
                f"chain {missing[0]} has none"
            )
        return np.array(
            [disagreement(item.member_probs or [], mode) for item in scores], dtype=np.float64
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
            out[index] = tier + step_entropy(item.step_probs, mode) / np.log(2)
    return out


def spread_over_groups(
    priority: np.ndarray, groups: Sequence[Hashable], tiebreak: np.ndarray | None = None
) -> np.ndarray:
    """Priorities re-ranked round-robin over groups (problems): every group's best chain
    first, in ``priority`` order, then every group's second best, and so on. Returns new
    priorities, higher sooner (n for the first, 1 for the last); NaN ranks last; equal
    priorities go by ``tiebreak`` (ascending; default: input order).

    >>> spread_over_groups(np.array([0.9, 0.8, 0.1, 0.5]), ["a", "a", "b", "c"]).tolist()
    [4.0, 1.0, 2.0, 3.0]
    """
    value = np.where(np.isnan(priority), -np.inf, priority)
    ties = np.arange(len(value)) if tiebreak is None else tiebreak
    order = np.lexsort((ties, -value))  # best first
    position = np.empty(len(value), dtype=np.int64)
    position[order] = np.arange(len(value))
    seen: dict[Hashable, int] = {}
    rank = np.empty(len(value), dtype=np.int64)
    for index in order:
        rank[index] = seen.get(groups[index], 0)
        seen[groups[index]] = rank[index] + 1
    spread = np.lexsort((position, rank))  # rank first, then the order above
    out = np.empty(len(value), dtype=np.float64)
    out[spread] = np.arange(len(value), 0, -1, dtype=np.float64)
    return out


def select_batch(
    strategy: str,
    scores: Sequence[ChainScores],
    k: int,
    *,
    random_fraction: float = 0.2,
    answers_correct: Sequence[bool | None] | None = None,
    first_error_labeling: bool = False,
    groups: Sequence[Hashable] | None = None,
    rng: np.random.Generator,
) -> list[int]:
    """Indices of ``k`` chains to label next: ``round(k * (1 - random_fraction))`` by highest
    acquisition score (ties broken at random; spread over ``groups``, the chains' problems,
    when given), the rest uniformly from the remainder."""
    if not 0.0 <= random_fraction <= 1.0:
        raise ValueError("random_fraction must be within [0, 1]")
    n = len(scores)
    k = max(0, min(k, n))
    if k == 0:
        return []
    by_score = 0 if strategy == "random" else round(k * (1.0 - random_fraction))
    chosen: list[int] = []
    if by_score:
        priority = acquisition_scores(
            strategy,
            scores,
            answers_correct=answers_correct,
            first_error_labeling=first_error_labeling,
            rng=rng,
        )
        tiebreak = rng.random(n)
        if groups is not None:
            priority = spread_over_groups(priority, groups, tiebreak)
        # lexsort's last key is the primary one: priority descending, random tie-break.
        order = np.lexsort((tiebreak, -priority))
        chosen = [int(i) for i in order[:by_score]]
    taken = set(chosen)
    rest = np.array([i for i in range(n) if i not in taken], dtype=np.int64)
    if k <= len(chosen):
        return chosen
    return chosen + [int(i) for i in rng.choice(rest, size=k - len(chosen), replace=False)]
