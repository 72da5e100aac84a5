"""Dawid-Skene: each step's label from votes weighed by how reliable each voter is.

Steps are the items, voters (annotators, and import sources where they count) the
workers, the ratings -1/0/+1 the classes. Dawid and Skene's EM learns one confusion matrix
per voter from all of a project's votes at once, so an annotator who agrees with the others
where the truth is clear weighs more where it is not; gold chains pin their steps to the
answer key during EM, which teaches the model each voter's errors on known ground. The EM
is crowd-kit's (``crowdkit.aggregation.classification.dawid_skene``), not ours.

crowd-kit is imported inside ``dawid_skene_posteriors`` only: its package imports pandas,
scipy and nltk (not torch), about a second, which no request that does not fit pays.

This module is pure (numpy arrays in, arrays out) and imports nothing of the project, so
it is tested without a database; ``annotation.quality.consensus_fit`` loads the votes.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

# Posteriors this close count as equal: the steps' label is a tie, as in majority vote.
TIE_TOLERANCE = 1e-6
MAX_ITERATIONS = 100
TOLERANCE = 1e-5


@dataclass(frozen=True, slots=True)
class Posteriors:
    """One entry per step (the ``steps`` of ``dawid_skene_posteriors``, in that order):
    the most probable label, its posterior probability, and whether another label is as
    probable (then ``labels`` holds the lowest of the tied, majority vote's tie rule).
    ``reliability`` is each worker's estimated accuracy (the chance they give the true
    label, averaged over the labels' prior), in worker-index order."""

    steps: np.ndarray  # int64 [S], the step ids that had votes, ascending
    labels: np.ndarray  # int8 [S]
    probability: np.ndarray  # float64 [S]
    tied: np.ndarray  # bool [S]
    reliability: np.ndarray  # float64 [W]
    iterations: int


def dawid_skene_posteriors(
    *,
    steps: np.ndarray,
    workers: np.ndarray,
    ratings: np.ndarray,
    worker_count: int,
    gold: Mapping[int, int] | None = None,
) -> Posteriors:
    """Fit Dawid-Skene on the votes ``(steps[i], workers[i], ratings[i])`` (one vote per
    worker and step) and return each voted step's posterior label.

    ``workers`` are indexes in ``range(worker_count)``; ``gold`` maps step ids to their
    known rating: those steps are held at it during EM (crowd-kit's ``true_labels``).

    >>> p = dawid_skene_posteriors(
    ...     steps=np.array([1, 1, 2, 2]), workers=np.array([0, 1, 0, 1]),
    ...     ratings=np.array([1, 1, -1, -1]), worker_count=2)
    >>> p.labels.tolist(), p.tied.tolist()
    ([1, -1], [False, False])
    """
    if not len(steps):
        empty = np.zeros(0)
        return Posteriors(
            steps=empty.astype(np.int64),
            labels=empty.astype(np.int8),
            probability=empty,
            tied=empty.astype(bool),
            reliability=np.full(worker_count, np.nan),
            iterations=0,
        )
    import pandas as pd
    from crowdkit.aggregation.classification.dawid_skene import DawidSkene

    data = pd.DataFrame(
        {
            "task": np.asarray(steps, dtype=np.int64),
            "worker": np.asarray(workers, dtype=np.int32),
            "label": np.asarray(ratings, dtype=np.int64),
        }
    )
    true_labels = None
    if gold:
        voted = set(np.unique(data["task"]).tolist())
        known = {step: rating for step, rating in gold.items() if step in voted}
        if known:
            true_labels = pd.Series(known, dtype=np.int64)
    model = DawidSkene(n_iter=MAX_ITERATIONS, tol=TOLERANCE)
    with warnings.catch_warnings():
        # crowd-kit 1.4 still passes inplace= to pandas, which pandas 3 deprecates.
        warnings.simplefilter("ignore", category=DeprecationWarning)
        warnings.simplefilter("ignore", category=FutureWarning)
        model.fit(data, true_labels=true_labels)
    assert model.probas_ is not None  # set by fit
    probas = model.probas_.sort_index().sort_index(axis=1)
    classes = np.asarray(probas.columns, dtype=np.int8)  # ascending: -1, 0, 1
    matrix = probas.to_numpy(dtype=np.float64)
    top = matrix.max(axis=1)
    # The first column within the tolerance of the top is the lowest tied label.
    near_top = matrix >= (top[:, None] - TIE_TOLERANCE)
    labels = classes[near_top.argmax(axis=1)]
    tied = near_top.sum(axis=1) > 1
    return Posteriors(
        steps=np.asarray(probas.index, dtype=np.int64),
        labels=labels,
        probability=top,
        tied=tied,
        reliability=_reliability(model=model, worker_count=worker_count),
        iterations=len(model.loss_history_),
    )


def _reliability(*, model: object, worker_count: int) -> np.ndarray:
    """Per worker: the sum over labels c of prior(c) * P(worker says c | the truth is c)."""
    errors = model.errors_  # type: ignore[attr-defined]  # rows (worker, said), columns truth
    priors = model.priors_  # type: ignore[attr-defined]
    result = np.zeros(worker_count)
    seen = np.zeros(worker_count, dtype=bool)
    for (worker, said), row in errors.iterrows():
        if said in priors.index and said in row.index:
            result[int(worker)] += float(priors[said]) * float(row[said])
            seen[int(worker)] = True
    result[~seen] = np.nan
    return result
