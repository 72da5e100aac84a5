"""The intervals the learning results rest on (``prm_training.ml.paired``), checked on
simulated data where the true difference is known."""

from __future__ import annotations

import numpy as np

from prm_training.ml.paired import paired_bootstrap, resampled_interval, seeds_needed

TRUE_DIFFERENCE = 0.02


def _repeated_split_differences(
    rng: np.random.Generator, *, replicates: int, seeds: int, problems: int
) -> np.ndarray:
    """[replicates, seeds] per-seed paired differences, as the simulator and the bench
    measure them: each replicate is one data set of ``problems`` problems drawn from a
    population whose mean difference is TRUE_DIFFERENCE (1 to 3 chains a problem, a
    problem effect and a chain effect), and each seed of it holds out a random fifth of
    the problems, so the seeds' held-out parts overlap; what the models learn from the
    other four fifths moves the difference too (a training effect), and so does the
    seed's own training noise."""
    chains = rng.integers(1, 4, size=(replicates, 1, problems)).astype(np.float64)
    problem_effect = rng.normal(0.0, 0.15, size=(replicates, 1, problems))
    # The sum over a problem's chains of (problem effect + chain effect).
    chain_sum = chains * problem_effect + rng.normal(0.0, 0.2, size=chains.shape) * np.sqrt(chains)
    learned = rng.normal(0.0, 0.1, size=(replicates, 1, problems))  # what training on it adds
    order = rng.random((replicates, seeds, problems)).argsort(axis=2)
    heldout = order < problems // 5  # [R, J, P]: a random fifth of the problems
    measured = (heldout * chain_sum).sum(2) / (heldout * chains).sum(2)
    trained = (~heldout * learned).sum(2) / (~heldout).sum(2)
    noise = rng.normal(0.0, 0.02, size=(replicates, seeds))
    return TRUE_DIFFERENCE + measured + trained + noise


def _coverage(differences: np.ndarray, heldout_fraction: float) -> float:
    intervals = [resampled_interval(row, heldout_fraction=heldout_fraction) for row in differences]
    return float(np.mean([i.low <= TRUE_DIFFERENCE <= i.high for i in intervals]))


def test_the_corrected_interval_covers_the_true_difference_of_overlapping_splits() -> None:
    # Given: 1,500 data sets of 150 problems, each measured over 20 seeds whose held-out
    # fifths overlap (the simulator's and the bench's design)
    differences = _repeated_split_differences(
        np.random.default_rng(7), replicates=1500, seeds=20, problems=150
    )

    # When: the 95% intervals are taken with and without the correction for the overlap
    corrected = _coverage(differences, heldout_fraction=0.2)
    plain = _coverage(differences, heldout_fraction=0.0)

    # Then: the corrected interval holds the true difference about 95% of the time (the
    # Nadeau-Bengio correction errs wide when training adds its own noise); Student's t
    # over seeds as if they were independent holds it far less often
    assert 0.93 <= corrected <= 0.99, corrected
    assert plain < 0.75, plain


def test_more_seeds_cannot_narrow_the_interval_past_what_the_data_set_allows() -> None:
    # Given: per-seed differences with a spread of 0.03
    rng = np.random.default_rng(0)
    spread = rng.normal(0.0, 0.03, size=400)

    # When / Then: 400 seeds still leave half the spread's width, and the seeds needed for
    # a 0.01 half-width are "none" (only more chains get there) while 0.05 needs a few
    assert resampled_interval(spread).half_width > 0.5 * 1.96 * 0.03 * 0.5
    assert seeds_needed(spread[:50], 0.01) is None
    needed = seeds_needed(spread[:50], 0.05)
    assert needed is not None and needed < 20


def test_the_problem_bootstrap_resamples_whole_problems() -> None:
    # Given: 30 problems of 10 chains each, the chains of a problem all alike (a hit or a
    # miss together), so there are 30 independent units, not 300
    hits = np.repeat(np.random.default_rng(3).random(30) < 0.5, 10).astype(np.float64)
    problems = [str(i // 10) for i in range(300)]

    # When
    clustered = paired_bootstrap(lambda w: (w * hits).sum(1) / w.sum(1), problems)
    as_chains = paired_bootstrap(
        lambda w: (w * hits).sum(1) / w.sum(1), [str(i) for i in range(300)]
    )

    # Then: the interval is as wide as 30 units allow (about 2 x 1.96 x 0.5 / sqrt(30)),
    # three times what treating the 300 chains as independent would claim
    assert clustered.n == 30 and clustered.high - clustered.low > 0.3
    assert as_chains.high - as_chains.low < 0.15
