"""Held-out metrics of a PRM, from labeled chains and their scores (numpy only).

* ``step_auroc``: ROC AUC of P(correct) over labeled steps, +1 positive, -1 negative;
  ambiguous (0) and unrated steps are left out (no right answer to rank them against).
* ``first_error_accuracy``: share of chains whose predicted first error (``Readout``: the
  first step with P(correct) < threshold, or "none"; with the final answer's grade, the
  most likely error of a chain graded wrong) equals the labeled one (the first -1, or
  "none").
* ``processbench_f1``: ProcessBench's F1, the harmonic mean of that accuracy on chains with
  an error and on chains without.
* ``mean_subset_f1`` (F1 per subset, ``subset_f1:<subset>``, and their mean, as
  ProcessBench reports it), ``prmscore`` (PRMBench, where labels go past the first
  error) and ``right_answer_recall`` (first errors found in chains whose final answer
  is right): ``evaluation``, which also gives their intervals.
* ``calibration_error``: expected calibration error of P(correct) over the labeled +1/-1
  steps (10 equal-width bins): how far "0.8" is from being right 80% of the time.
* ``auc_interval``: the ROC AUC of one sample against another with DeLong's interval,
  for any score (the gold timing tests rank request times with it).

A chain counts for the chain-level metrics only when its labels settle the first error:
every step up to the first -1 (or every step, if there is none) is rated. A metric that is
undefined on the given chains (one class missing) is left out of the dict rather than
reported as NaN, so a caller should use ``.get``; the counts are always there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .data import ChainExample
from .readout import ChainScores, Readout, labeled_first_error


def auc_interval(
    positives: Sequence[float], negatives: Sequence[float], z: float = 1.959964
) -> tuple[float, float, float]:
    """(AUC, low, high): the chance that a positive scores above a negative (ties count
    half), with DeLong's normal interval at ``z`` (1.96: 95%). An AUC whose interval holds
    0.5 says the score tells the two apart no better than chance, either way round.

    >>> auc, low, high = auc_interval([3.0, 4.0, 5.0, 6.0], [1.0, 2.0, 3.5, 4.5])
    >>> round(auc, 4), low < 0.5 < high  # four of each: too few to tell
    (0.8125, True)
    """
    x = np.asarray(positives, dtype=np.float64)[:, None]
    y = np.asarray(negatives, dtype=np.float64)[None, :]
    if x.size < 2 or y.size < 2:
        raise ValueError("An AUC interval needs at least two of each.")
    psi = (x > y) + 0.5 * (x == y)  # [m, n]
    v10, v01 = psi.mean(axis=1), psi.mean(axis=0)
    auc = float(psi.mean())
    se = float(np.sqrt(v10.var(ddof=1) / v10.size + v01.var(ddof=1) / v01.size))
    return auc, auc - z * se, auc + z * se


def fit_platt(logits: Sequence[float], targets: Sequence[float]) -> tuple[float, float]:
    """(scale, bias) minimising the log loss of sigmoid(scale * logit + bias) against the
    0/1 ``targets`` (Platt scaling; Newton steps on a two-parameter convex problem, with a
    small ridge so separable data stays finite). Identity with one class or no data.

    >>> scale, bias = fit_platt([-2.0, -1.0, 1.0, 2.0, 3.0, -3.0], [0, 1, 1, 1, 0, 0])
    >>> round(scale, 2), round(bias, 2)
    (0.3, 0.0)
    """
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(targets, dtype=np.float64)
    if z.size == 0 or y.min() == y.max():
        return 1.0, 0.0
    x = np.stack([z, np.ones_like(z)], axis=1)  # [S, 2]
    prior = np.array([1.0, 0.0])
    ridge = 1e-3 * len(z)

    def loss(theta: np.ndarray) -> float:
        margin = x @ theta
        return float(
            np.sum(np.logaddexp(0.0, margin) - y * margin)
            + ridge / 2 * np.sum((theta - prior) ** 2)
        )

    theta = prior.copy()
    current = loss(theta)
    for _ in range(100):
        p = 1 / (1 + np.exp(-np.clip(x @ theta, -50, 50)))
        gradient = x.T @ (p - y) + ridge * (theta - prior)
        hessian = (x * (p * (1 - p))[:, None]).T @ x + ridge * np.eye(2)
        step = np.linalg.solve(hessian, gradient)
        size = 1.0
        while size > 1e-6 and loss(theta - size * step) > current:  # damped Newton
            size /= 2
        theta = theta - size * step
        previous, current = current, loss(theta)
        if previous - current < 1e-10 * max(1.0, abs(current)):
            break
    return float(theta[0]), float(theta[1])


def calibration_error(
    labels: Sequence[int] | np.ndarray, probs: Sequence[float] | np.ndarray, bins: int = 10
) -> float:
    """Expected calibration error: the mean |P - observed share| over equal-width bins of
    P, weighted by the bin's size.

    >>> calibration_error([1, 0, 1, 1], [0.75, 0.75, 0.75, 0.75])
    0.0
    """
    y = np.asarray(labels, dtype=np.float64)
    p = np.asarray(probs, dtype=np.float64)
    which = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in np.unique(which):
        inside = which == b
        total += inside.sum() * abs(p[inside].mean() - y[inside].mean())
    return float(total / len(p))


THRESHOLD_GRID = tuple(round(0.01 * i, 2) for i in range(1, 100))


def choose_threshold(
    labels: Sequence[Sequence[int | None] | None],
    step_probs: Sequence[Sequence[float]],
    grid: Sequence[float] = THRESHOLD_GRID,
) -> float:
    """The threshold of ``grid`` with the highest ProcessBench F1 of ``step_probs`` against
    ``labels`` (ties go to the one nearest 0.5); 0.5 when the chains cannot define F1 (no
    chain with an error, or none without).

    Why: a head trained on mostly-correct steps puts nearly every P(correct) above 0.5, so
    a fixed 0.5 predicts "no error" everywhere and F1 is ~0 whatever the ranking (AUROC)
    is. Chosen on training chains, never on the held-out ones it is evaluated on.

    >>> choose_threshold([(1, -1), (1, 1)], [(0.9, 0.7), (0.95, 0.8)])
    0.71
    """
    grid_array = np.asarray(grid, dtype=np.float64)
    hits_error, hits_correct, n_error, n_correct = _hits_by_threshold(
        labels, step_probs, grid_array
    )
    if n_error == 0 or n_correct == 0:
        return 0.5
    return _best_for_f1(grid_array, hits_error / n_error, hits_correct / n_correct)


def _hits_by_threshold(
    labels: Sequence[Sequence[int | None] | None],
    step_probs: Sequence[Sequence[float]],
    grid: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int, int]:
    """For every threshold of ``grid``: the chains with an error whose first error the
    threshold rule predicts, the same for chains without, and the two counts."""
    hits_error = np.zeros(len(grid))
    hits_correct = np.zeros(len(grid))
    n_error = n_correct = 0
    for chain_labels, probs in zip(labels, step_probs, strict=True):
        truth = labeled_first_error(chain_labels)
        if truth is None:
            continue
        p = np.asarray(probs, dtype=np.float64)
        # predicted first error == truth  <=>  every step before it >= t (and, for an
        # error at ``truth``, that step < t).
        before = p[:truth] if truth >= 0 else p
        ceiling = before.min() if before.size else np.inf
        if truth >= 0:
            n_error += 1
            hits_error += (grid <= ceiling) & (grid > p[truth])
        else:
            n_correct += 1
            hits_correct += grid <= ceiling
    return hits_error, hits_correct, n_error, n_correct


def _best_for_f1(
    grid: np.ndarray, error_accuracy: np.ndarray, correct_accuracy: np.ndarray
) -> float:
    """The grid value with the highest F1 of the two accuracies (ties: nearest 0.5)."""
    a, b = error_accuracy, correct_accuracy
    with np.errstate(invalid="ignore", divide="ignore"):
        f1 = np.where(a + b > 0, 2 * a * b / (a + b), 0.0)
    best = np.flatnonzero(f1 >= f1.max() - 1e-12)
    return float(grid[best[np.argmin(np.abs(grid[best] - 0.5))]])


def choose_readout(
    examples: Sequence[ChainExample],
    step_probs: Sequence[Sequence[float]],
    *,
    answer_aware: bool = True,
    threshold: float | None = None,
    grid: Sequence[float] = THRESHOLD_GRID,
) -> Readout:
    """The readout with the highest ProcessBench F1 on ``examples`` (training chains):
    ``threshold`` (given, or ``choose_threshold`` over every chain, the rule for ungraded
    ones), then, when ``answer_aware`` and some chain is graded, ``threshold_right``: the
    grid value that maximises the F1 of the whole readout, the other chains read as the
    readout reads them."""
    from .inputs import answer_grade

    labels = [example.labels for example in examples]
    if threshold is None:
        threshold = choose_threshold(labels, step_probs, grid)
    grades = [answer_grade(example) for example in examples]
    if not answer_aware or not any(grade is True for grade in grades):
        return Readout(threshold)
    fixed = Readout(threshold, threshold_right=0.5)
    grid_array = np.asarray(grid, dtype=np.float64)
    right = [i for i, grade in enumerate(grades) if grade is True]
    hits_error, hits_correct, n_error, n_correct = _hits_by_threshold(
        [labels[i] for i in right], [step_probs[i] for i in right], grid_array
    )
    for chain_labels, probs, grade in zip(labels, step_probs, grades, strict=True):
        truth = labeled_first_error(chain_labels)
        if grade is True or truth is None:
            continue
        hit = fixed.first_error(probs, grade) == truth
        if truth >= 0:
            n_error += 1
            hits_error += hit
        else:
            n_correct += 1
            hits_correct += hit
    if n_error == 0 or n_correct == 0:
        return Readout(threshold)
    return Readout(
        threshold, _best_for_f1(grid_array, hits_error / n_error, hits_correct / n_correct)
    )


def first_error_hits(
    examples: Sequence[ChainExample], scores: Sequence[ChainScores], readout: Readout
) -> dict[int, tuple[bool, bool]]:
    """chain_id -> (the chain has an error, the readout finds its first error exactly), for
    every chain whose labels settle the first error: what F1 is computed from."""
    hits: dict[int, tuple[bool, bool]] = {}
    for example, chain_scores in zip(examples, scores, strict=True):
        hit = _first_error_hit(example, chain_scores.step_probs, readout)
        if hit is not None:
            hits[example.chain_id] = hit
    return hits


def _first_error_hit(
    example: ChainExample, step_probs: Sequence[float], readout: Readout
) -> tuple[bool, bool] | None:
    """(the chain has an error, the readout finds its first error exactly), or None when
    the chain's labels do not settle its first error."""
    from .inputs import answer_grade

    truth = labeled_first_error(example.labels)
    if truth is None:
        return None
    grade = answer_grade(example) if readout.threshold_right is not None else None
    return truth >= 0, readout.first_error(step_probs, grade) == truth


@dataclass(frozen=True)
class PairedDifference:
    """A paired difference over the same chains with its 95% bootstrap interval."""

    mean: float
    low: float
    high: float
    chains: int

    @property
    def verdict(self) -> str:
        return "better" if self.low > 0 else "worse" if self.high < 0 else "no difference"

    def __str__(self) -> str:
        return (
            f"{self.mean:+.3f}, 95% interval {self.low:+.3f} to {self.high:+.3f} over "
            f"{self.chains} chains: {self.verdict}"
        )


def _f1_of(has_error: np.ndarray, hit: np.ndarray) -> np.ndarray:
    """F1 of each resample: has_error, hit [R, N] bool."""
    errors, correct = has_error.sum(1), (~has_error).sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        a = (hit & has_error).sum(1) / errors
        b = (hit & ~has_error).sum(1) / correct
        return np.where(a + b > 0, 2 * a * b / (a + b), 0.0)


def paired_f1_difference(
    new: dict[int, tuple[bool, bool]],
    old: dict[int, tuple[bool, bool]],
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> PairedDifference | None:
    """F1(new) - F1(old) on the chains both settle, with a paired bootstrap over chains
    (the same resampled chains for both, 2.5th and 97.5th percentiles); None when F1 is
    undefined (no chain with an error, or none without).

    >>> new = {i: (i % 2 == 0, True) for i in range(40)}
    >>> old = {i: (i % 2 == 0, i % 4 != 0) for i in range(40)}
    >>> paired_f1_difference(new, old).verdict
    'better'
    """
    chains = sorted(set(new) & set(old))
    has_error = np.array([new[c][0] for c in chains], dtype=bool)
    if not has_error.any() or has_error.all():
        return None
    hit_new = np.array([new[c][1] for c in chains], dtype=bool)
    hit_old = np.array([old[c][1] for c in chains], dtype=bool)
    point = float(
        _f1_of(has_error[None], hit_new[None])[0] - _f1_of(has_error[None], hit_old[None])[0]
    )
    rng = np.random.default_rng(seed)
    index = rng.integers(0, len(chains), size=(resamples, len(chains)))
    diffs = _f1_of(has_error[index], hit_new[index]) - _f1_of(has_error[index], hit_old[index])
    low, high = np.nanpercentile(diffs, [2.5, 97.5])
    return PairedDifference(point, float(low), float(high), len(chains))


def evaluate(
    examples: Sequence[ChainExample],
    scores: Sequence[ChainScores],
    readout: Readout | float = 0.5,
) -> dict[str, float]:
    """Metrics of ``scores`` (in the same order as ``examples``) against the labels; the
    first error predicted by ``readout`` (a bare number: the threshold alone)."""
    if not isinstance(readout, Readout):
        readout = Readout(float(readout))
    threshold = readout.threshold
    if len(examples) != len(scores):
        raise ValueError(f"{len(examples)} examples but {len(scores)} scores")
    step_labels: list[int] = []
    step_probs: list[float] = []
    hits_error: list[bool] = []
    hits_correct: list[bool] = []
    for example, chain_scores in zip(examples, scores, strict=True):
        if example.chain_id != chain_scores.chain_id:
            raise ValueError(
                f"scores out of order: chain {chain_scores.chain_id} for {example.chain_id}"
            )
        if example.labels is None:
            continue
        for rating, prob in zip(example.labels, chain_scores.step_probs, strict=True):
            if rating in (1, -1):
                step_labels.append(1 if rating == 1 else 0)
                step_probs.append(prob)
        hit = _first_error_hit(example, chain_scores.step_probs, readout)
        if hit is not None:
            has_error, found = hit
            (hits_error if has_error else hits_correct).append(found)

    metrics: dict[str, float] = {
        "heldout_steps": float(len(step_labels)),
        "heldout_chains": float(len(hits_error) + len(hits_correct)),
        "chains_with_error": float(len(hits_error)),
        "chains_without_error": float(len(hits_correct)),
    }
    if step_labels:
        predicted_correct = np.asarray(step_probs) >= threshold
        metrics["step_accuracy"] = float(np.mean(predicted_correct == np.asarray(step_labels)))
        metrics["calibration_error"] = calibration_error(step_labels, step_probs)
        if 0 < sum(step_labels) < len(step_labels):
            from sklearn.metrics import roc_auc_score

            metrics["step_auroc"] = float(roc_auc_score(step_labels, step_probs))
    if hits_error or hits_correct:
        metrics["first_error_accuracy"] = float(np.mean([*hits_error, *hits_correct]))
    if hits_error:
        metrics["error_accuracy"] = float(np.mean(hits_error))
    if hits_correct:
        metrics["correct_accuracy"] = float(np.mean(hits_correct))
    if hits_error and hits_correct:
        a, b = metrics["error_accuracy"], metrics["correct_accuracy"]
        metrics["processbench_f1"] = 0.0 if a + b == 0 else 2 * a * b / (a + b)
    metrics.update(_official(examples, scores, readout))
    return metrics


# The benchmarks' own figures ``evaluate`` adds (``evaluation``); per subset as
# ``subset_f1:<subset>``.
OFFICIAL = ("mean_subset_f1", "right_answer_recall", "prmscore")


def _official(
    examples: Sequence[ChainExample], scores: Sequence[ChainScores], readout: Readout
) -> dict[str, float]:
    from .evaluation import point_metrics, scored_chains

    labeled = [(e, s.step_probs) for e, s in zip(examples, scores, strict=True) if e.labels]
    if not labeled:
        return {}
    chains = scored_chains([e for e, _ in labeled], [p for _, p in labeled], readout)
    return {
        name: value
        for name, value in point_metrics(chains).items()
        if name in OFFICIAL or name.startswith("subset_f1:")
    }
