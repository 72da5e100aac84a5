"""The benchmarks' own figures of a PRM on labeled chains, and their intervals (numpy only).

* ProcessBench's F1 **per subset** (``subset_f1``: the harmonic mean of the accuracy on
  chains with an error, the first error found exactly, and on chains without, "no error"
  said) and their mean (``mean_subset_f1``), as its paper reports them; a chain's subset
  is ``ChainExample.subset`` (its file or its record id, ``subset_of``). ``f1`` pools
  every chain, as Steplab reported before.
* PRMBench's **PRMScore** (``prmscore``): 0.5 F1 of the steps called correct + 0.5 F1 of
  the steps called wrong (P(correct) below the readout's threshold), over the chains whose
  every step is rated. Only where the labels go past a first error: under first-error
  labeling the fully rated chains are the ones without an error, and the score would be
  on one class.
* **Right answer, flawed process** (``right_answer_recall``): among chains whose final
  answer is graded right but whose labels hold an error, the share whose first error the
  readout finds exactly. A rule that reads only the answer finds none of these.
* ``auroc`` of P(correct) over +1/-1 steps and ``first_error_accuracy``.

Every figure is computed from weights per chain (``weighted_metrics``), so the same code
gives the point estimate (all weights 1) and each problem resample of the bootstrap
(``paired.problem_resamples``); ``evaluation_report`` gives the figures of a model and of
the baselines scored on the same chains, with 95% intervals, and the model's paired
difference with the strongest baseline on each figure (the best of them there).
"""

from __future__ import annotations

import math
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .data import ChainExample
from .paired import Interval, problem_bootstrap, problem_resamples
from .readout import Readout, labeled_first_error

# The figures of a report, in the order pages show them.
FIGURES = ("mean_subset_f1", "f1", "auroc", "first_error_accuracy", "right_answer_recall")
OPTIONAL_FIGURES = ("prmscore",)
RESAMPLES = 1000
# Resamples scored at once: bounds the memory of the step-level figures.
_CHUNK = 100
_SUBSET_CHARS = 64


def subset_of(*, stated: object = None, record_id: object = None, source: str = "") -> str:
    """A chain's subset: a subset its metadata states, else the prefix of a ProcessBench
    record id (``gsm8k-12`` -> ``gsm8k``, ``olympiadbench-3`` -> ``olympiadbench``), else
    ``source`` (the file it came from), trimmed to 64 characters.

    >>> subset_of(record_id="math-17"), subset_of(stated="omni", record_id="math-1")
    ('math', 'omni')
    >>> subset_of(record_id=17, source="gsm8k.json")
    'gsm8k'
    """
    if isinstance(stated, str) and stated.strip():
        return stated.strip()[:_SUBSET_CHARS]
    if isinstance(record_id, str):
        match = re.fullmatch(r"\s*([A-Za-z][\w.]*?)[-_]\d+\s*", record_id)
        if match:
            return match.group(1)[:_SUBSET_CHARS]
    name = source.rsplit("/", 1)[-1]
    for suffix in (".jsonl", ".json", ".csv", ".parquet"):
        name = name.removesuffix(suffix)
    return name.strip()[:_SUBSET_CHARS]


@dataclass(frozen=True)
class ScoredChains:
    """What the figures are computed from: per chain (n) and per rated +1/-1 step (m)."""

    problems: tuple[str, ...]  # [n]
    subsets: tuple[str, ...]  # [n]
    settled: np.ndarray  # [n] bool: the labels settle the first error
    has_error: np.ndarray  # [n] bool
    hit: np.ndarray  # [n] bool: the readout finds the first error (or "none") exactly
    answer_right: np.ndarray  # [n] bool: the final answer is graded right
    step_chain: np.ndarray  # [m] int
    step_correct: np.ndarray  # [m] bool
    step_prob: np.ndarray  # [m] float
    step_full: np.ndarray  # [m] bool: a step of a chain whose every step is rated
    threshold: float
    full_labels: bool  # some chain is rated past its first error (PRMScore is defined)


def scored_chains(
    examples: Sequence[ChainExample],
    step_probs: Sequence[Sequence[float]],
    readout: Readout,
    grades: Sequence[bool | None] | None = None,
) -> ScoredChains:
    """The chains' labels and one scorer's step probabilities, read by ``readout``;
    ``grades``: each final answer's grade when already known (``inputs.answer_grade``)."""
    from .inputs import answer_grade

    if grades is None:
        grades = [answer_grade(example) for example in examples]
    settled, has_error, hit, right = [], [], [], []
    step_chain: list[int] = []
    step_correct: list[bool] = []
    step_prob: list[float] = []
    step_full: list[bool] = []
    full_labels = False
    for index, (example, probs, grade) in enumerate(zip(examples, step_probs, grades, strict=True)):
        labels = example.labels or (None,) * len(example.steps)
        truth = labeled_first_error(labels)
        settled.append(truth is not None)
        has_error.append(truth is not None and truth >= 0)
        predicted = readout.first_error(
            probs, grade if readout.threshold_right is not None else None
        )
        hit.append(truth is not None and predicted == truth)
        right.append(grade is True)
        full = all(rating is not None for rating in labels)
        full_labels |= full and truth is not None and truth >= 0 and truth < len(labels) - 1
        for rating, prob in zip(labels, probs, strict=True):
            if rating in (1, -1):
                step_chain.append(index)
                step_correct.append(rating == 1)
                step_prob.append(float(prob))
                step_full.append(full)
    return ScoredChains(
        problems=tuple(example.problem.strip() for example in examples),
        subsets=tuple(example.subset for example in examples),
        settled=np.asarray(settled, dtype=bool),
        has_error=np.asarray(has_error, dtype=bool),
        hit=np.asarray(hit, dtype=bool),
        answer_right=np.asarray(right, dtype=bool),
        step_chain=np.asarray(step_chain, dtype=np.int64),
        step_correct=np.asarray(step_correct, dtype=bool),
        step_prob=np.asarray(step_prob, dtype=np.float64),
        step_full=np.asarray(step_full, dtype=bool),
        threshold=readout.threshold,
        full_labels=full_labels,
    )


def _share(weights: np.ndarray, hits: np.ndarray, among: np.ndarray) -> np.ndarray:
    """[R] weighted share of ``hits`` among the chains ``among`` (NaN where none)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (weights @ (hits & among).astype(np.float64)) / (weights @ among.astype(np.float64))


def _harmonic(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(a + b > 0, 2 * a * b / (a + b), np.where(np.isnan(a + b), np.nan, 0.0))


def _f1(chains: ScoredChains, weights: np.ndarray, among: np.ndarray) -> np.ndarray:
    """[R] ProcessBench F1 over the chains ``among``."""
    errors = among & chains.settled & chains.has_error
    clean = among & chains.settled & ~chains.has_error
    return _harmonic(_share(weights, chains.hit, errors), _share(weights, chains.hit, clean))


def _auroc(chains: ScoredChains, step_weights: np.ndarray) -> np.ndarray:
    """[R] weighted Mann-Whitney ROC AUC of the step probabilities (ties count half)."""
    order = np.argsort(chains.step_prob, kind="mergesort")
    scores, correct = chains.step_prob[order], chains.step_correct[order]
    starts = np.flatnonzero(np.r_[True, np.diff(scores) != 0])
    weights = step_weights[:, order]
    negatives = np.add.reduceat(weights * ~correct, starts, axis=1)  # [R, G]
    positives = np.add.reduceat(weights * correct, starts, axis=1)
    below = np.cumsum(negatives, axis=1) - negatives
    with np.errstate(invalid="ignore", divide="ignore"):
        return (positives * (below + 0.5 * negatives)).sum(1) / (
            positives.sum(1) * negatives.sum(1)
        )


def _prmscore(chains: ScoredChains, step_weights: np.ndarray) -> np.ndarray:
    """[R] PRMBench's PRMScore over the steps of fully rated chains."""
    weights = step_weights * chains.step_full
    said = chains.step_prob >= chains.threshold
    true_pos = weights @ (said & chains.step_correct).astype(np.float64)
    true_neg = weights @ (~said & ~chains.step_correct).astype(np.float64)
    wrong = weights @ (said != chains.step_correct).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        return 0.5 * (2 * true_pos / (2 * true_pos + wrong)) + 0.5 * (
            2 * true_neg / (2 * true_neg + wrong)
        )


def weighted_metrics(chains: ScoredChains, weights: np.ndarray) -> dict[str, np.ndarray]:
    """Every figure of the module docstring for each row of chain ``weights`` [R, n]: a
    dict of [R] arrays (NaN where a row leaves a figure undefined); per subset as
    ``subset_f1:<name>``."""
    everything = np.ones(len(chains.problems), dtype=bool)
    out = {
        "f1": _f1(chains, weights, everything),
        "first_error_accuracy": _share(weights, chains.hit, chains.settled),
        "right_answer_recall": _share(
            weights, chains.hit, chains.settled & chains.has_error & chains.answer_right
        ),
    }
    subsets = np.asarray(chains.subsets, dtype=object)
    per_subset = []
    for name in sorted(set(chains.subsets)):
        out[f"subset_f1:{name}"] = _f1(chains, weights, subsets == name)
        per_subset.append(out[f"subset_f1:{name}"])
    with warnings.catch_warnings():
        # A mean of nothing but NaN is an undefined figure, not news.
        warnings.simplefilter("ignore", RuntimeWarning)
        out["mean_subset_f1"] = np.nanmean(np.stack(per_subset), axis=0)
    step_weights = weights[:, chains.step_chain]
    if chains.step_correct.size:
        out["auroc"] = _auroc(chains, step_weights)
    if chains.full_labels:
        out["prmscore"] = _prmscore(chains, step_weights)
    return out


def point_metrics(chains: ScoredChains) -> dict[str, float]:
    """The figures on the chains as they are (every weight 1), the undefined ones left out.

    >>> chains = [ChainExample(1, "p", ("a", "b"), (1, -1), subset="x"),
    ...           ChainExample(2, "q", ("a",), (1,), subset="y")]
    >>> point_metrics(scored_chains(chains, [(0.9, 0.2), (0.8,)], Readout(0.5)))["f1"]
    1.0
    """
    values = weighted_metrics(chains, np.ones((1, len(chains.problems))))
    return {name: float(value[0]) for name, value in values.items() if math.isfinite(value[0])}


Scorer = tuple[Sequence[Sequence[float]], Readout]


def evaluation_report(
    examples: Sequence[ChainExample],
    scorers: Mapping[str, Scorer],
    *,
    model: str = "model",
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> dict[str, Any]:
    """The figures of every scorer (``model`` and the baselines: name -> (step
    probabilities in the order of ``examples``, readout)) on the same chains, each with
    its 95% problem-bootstrap interval, and the model's paired difference with the
    strongest baseline on each figure (all from the same resamples). JSON-ready::

        {"chains", "problems", "subsets": [{"name", "chains"}],
         "scores": {scorer: {figure: {"mean", "low", "high", "n"}}},
         "strongest": {figure: baseline}, "versus_strongest": {figure: {...}}}

    A figure undefined on these chains is left out."""
    if model not in scorers:
        raise ValueError(f"no scorer named {model!r}")
    from .inputs import answer_grade

    grades = [answer_grade(example) for example in examples]
    tables = {
        name: scored_chains(examples, probs, readout, grades)
        for name, (probs, readout) in scorers.items()
    }
    problems = [example.problem.strip() for example in examples]
    points = {name: point_metrics(table) for name, table in tables.items()}
    draws: dict[str, dict[str, list[np.ndarray]]] = {name: {} for name in tables}
    for start in range(0, resamples, _CHUNK):
        weights = problem_resamples(
            problems, resamples=min(_CHUNK, resamples - start), seed=seed + start
        )
        for name, table in tables.items():
            for figure, values in weighted_metrics(table, weights).items():
                draws[name].setdefault(figure, []).append(values)
    resampled = {
        name: {figure: np.concatenate(parts) for figure, parts in figures.items()}
        for name, figures in draws.items()
    }
    count = len(set(problems))
    scores = {
        name: {
            figure: problem_bootstrap(value, resampled[name][figure], problems=count).as_dict()
            for figure, value in points[name].items()
        }
        for name in tables
    }
    strongest: dict[str, str] = {}
    versus: dict[str, dict[str, float]] = {}
    for figure, value in points[model].items():
        rivals = [
            (points[name][figure], name)
            for name in tables
            if name != model and figure in points[name]
        ]
        if not rivals:
            continue
        best_value, best = max(rivals)
        strongest[figure] = best
        gap = resampled[model][figure] - resampled[best][figure]
        versus[figure] = problem_bootstrap(value - best_value, gap, problems=count).as_dict()
    settled = tables[model].settled
    subset_counts: dict[str, int] = {}
    for subset, is_settled in zip(tables[model].subsets, settled, strict=True):
        subset_counts[subset] = subset_counts.get(subset, 0) + int(is_settled)
    return {
        "chains": int(settled.sum()),
        "problems": count,
        "subsets": [{"name": name, "chains": n} for name, n in sorted(subset_counts.items())],
        "scores": scores,
        "strongest": strongest,
        "versus_strongest": versus,
    }


def report_interval(entry: Mapping[str, float] | None) -> Interval | None:
    """A stored interval (``Interval.as_dict``) read back; None when there is none."""
    if not entry or "mean" not in entry:
        return None
    return Interval(
        float(entry["mean"]),
        float(entry.get("low", -math.inf)),
        float(entry.get("high", math.inf)),
        int(entry.get("n", 0)),
    )
