"""Paired comparisons: a learning result is a claim about noise.

Two designs, one function each, used wherever the design occurs:

* **Repeated splits** (``resampled_interval``). The simulator, ``bench_prm_vs_rules`` and
  the evidence ``auto`` reads run every strategy or model of a seed on that seed's split
  by problem (a fifth held out, a different fifth per seed) and compare them by the
  per-seed difference. The seeds' splits are drawn from one data set, so their held-out
  parts overlap and their differences are correlated: Student's t over seeds treats
  them as independent and is too narrow (it shrinks as 1/sqrt(seeds) while the data
  set's own luck never averages out). The corrected resampled t-test of Nadeau and
  Bengio (2003, as Bouckaert and Frank 2004 state it) widens the variance of the mean to
  (1/J + n_test/n_train) s^2 over J seeds, with J - 1 degrees of freedom. With a fifth
  held out the second term is 0.25, so beyond about 20 seeds more seeds barely narrow the
  interval: only more data does. ``tests/prm_training/ml/test_paired.py`` checks its
  coverage on simulated splits with a known difference (and that the plain t interval
  under-covers there).
* **One fixed set of chains** (``problem_bootstrap``). A model version against the
  baselines on its held-out chains, or on an evaluation set: nothing is resampled but the
  chains themselves, and chains of one problem are alike, so the paired bootstrap
  resamples whole problems (each resample draws problems with replacement and takes
  every chain of each), the percentile interval of the difference.

A difference whose interval holds 0 is "no difference", whatever its mean says.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# The held-out share of every split the simulator and the bench make (and of a
# snapshot's default split): what ``resampled_interval`` corrects for by default.
HELDOUT_FRACTION = 0.2


@dataclass(frozen=True)
class Interval:
    """A mean with its 95% interval ``low``..``high`` (symmetric for a t interval)."""

    mean: float
    low: float
    high: float
    n: int  # seeds, or resampled problems

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def verdict(self) -> str:
        """ "better", "worse" or "no difference" (the interval holds 0)."""
        if self.low > 0:
            return "better"
        if self.high < 0:
            return "worse"
        return "no difference"

    def __str__(self) -> str:
        if math.isnan(self.mean):
            return "n/a"
        if math.isinf(self.half_width):
            return f"{self.mean:+.3f} (one seed)"
        if abs((self.high - self.mean) - (self.mean - self.low)) < 5e-4:
            return f"{self.mean:+.3f} ± {self.half_width:.3f}"
        return f"{self.mean:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"

    def as_dict(self) -> dict[str, float]:
        """The stored form (finite numbers only: PostgreSQL's jsonb refuses NaN/inf)."""
        return {
            key: value
            for key, value in (("mean", self.mean), ("low", self.low), ("high", self.high))
            if math.isfinite(value)
        } | {"n": float(self.n)}


def _t_interval(values: Sequence[float], inflation: float) -> Interval:
    """Mean and 95% t interval of ``values`` (NaNs left out) whose variance of the mean is
    ``inflation`` * s^2 (1/J for independent values)."""
    from scipy import stats

    array = np.asarray([v for v in values if not math.isnan(v)], dtype=np.float64)
    if array.size == 0:
        return Interval(math.nan, -math.inf, math.inf, 0)
    mean = float(array.mean())
    if array.size == 1:
        return Interval(mean, -math.inf, math.inf, 1)
    sd = float(array.std(ddof=1))
    half = float(stats.t.ppf(0.975, array.size - 1)) * sd * math.sqrt(inflation)
    return Interval(mean, mean - half, mean + half, int(array.size))


def split_ratio(heldout_fraction: float) -> float:
    """n_test / n_train of a split that holds out ``heldout_fraction`` of the data.

    >>> split_ratio(0.2)
    0.25
    """
    if not 0.0 <= heldout_fraction < 1.0:
        raise ValueError("the held-out fraction must be within [0, 1)")
    return heldout_fraction / (1.0 - heldout_fraction)


def resampled_interval(
    differences: Sequence[float], *, heldout_fraction: float = HELDOUT_FRACTION
) -> Interval:
    """Mean and 95% interval of per-seed paired ``differences`` from repeated random
    splits that each hold out ``heldout_fraction`` of one data set: the corrected
    resampled t (module docstring). NaNs are left out; one value has an infinite interval.
    ``heldout_fraction`` 0 is the plain t interval, right only for independent data sets.

    >>> str(resampled_interval([0.01, 0.03, 0.02, 0.04]))
    '+0.025 ± 0.029'
    >>> str(resampled_interval([0.01, 0.03, 0.02, 0.04], heldout_fraction=0))
    '+0.025 ± 0.021'
    """
    kept = sum(1 for v in differences if not math.isnan(v))
    inflation = 1.0 / max(kept, 1) + split_ratio(heldout_fraction)
    return _t_interval(differences, inflation)


def seeds_needed(
    differences: Sequence[float],
    effect: float,
    *,
    heldout_fraction: float = HELDOUT_FRACTION,
    most: int = 1000,
) -> int | None:
    """Seeds for a 95% half-width of ``effect`` at the spread of ``differences``, with the
    correction of ``resampled_interval``; None when there are fewer than two differences
    or when no number of seeds up to ``most`` gets there (the correction's floor,
    t * s * sqrt(n_test/n_train), is wider than ``effect``: only more chains resolve it).

    >>> seeds_needed([0.0, 0.01, -0.01, 0.005, -0.005], 0.02)
    4
    >>> seeds_needed([0.0, 0.05, -0.05, 0.02, -0.02], 0.02) is None
    True
    """
    from scipy import stats

    array = np.asarray([v for v in differences if not math.isnan(v)], dtype=np.float64)
    if array.size < 2:
        return None
    sd = float(array.std(ddof=1))
    ratio = split_ratio(heldout_fraction)
    for n in range(2, most + 1):
        if float(stats.t.ppf(0.975, n - 1)) * sd * math.sqrt(1 / n + ratio) <= effect:
            return n
    return None


def problem_resamples(
    problems: Sequence[str], *, resamples: int = 1000, seed: int = 0
) -> np.ndarray:
    """[resamples, items] integer weights: in each resample, how often each item's problem
    was drawn when the problems are drawn with replacement (a cluster bootstrap: every
    item of a drawn problem comes along). Items are chains or steps, ``problems[i]`` the
    problem of item i.

    >>> weights = problem_resamples(["a", "a", "b"], resamples=3, seed=1)
    >>> weights.shape, bool((weights[:, 0] == weights[:, 1]).all())
    ((3, 3), True)
    """
    names, index = np.unique(np.asarray(problems, dtype=object).astype(str), return_inverse=True)
    rng = np.random.default_rng(seed)
    drawn = rng.integers(0, len(names), size=(resamples, len(names)))
    counts = np.zeros((resamples, len(names)), dtype=np.float64)
    np.add.at(counts, (np.arange(resamples)[:, None], drawn), 1.0)
    return counts[:, index]


def problem_bootstrap(point: float, resampled: np.ndarray, *, problems: int) -> Interval:
    """The 95% percentile interval of a statistic whose value on the data is ``point``
    and on each problem resample (``problem_resamples``) is ``resampled`` [R] (NaN where a
    resample leaves it undefined).

    >>> str(problem_bootstrap(0.1, np.linspace(0.0, 0.2, 401), problems=30))
    '+0.100 ± 0.095'
    """
    kept = resampled[np.isfinite(resampled)]
    if kept.size == 0 or not math.isfinite(point):
        return Interval(point, -math.inf, math.inf, problems)
    low, high = np.percentile(kept, [2.5, 97.5])
    return Interval(point, float(low), float(high), problems)


def paired_bootstrap(
    statistic: Callable[[np.ndarray], np.ndarray],
    problems: Sequence[str],
    *,
    resamples: int = 1000,
    seed: int = 0,
) -> Interval:
    """``statistic`` (item weights [R, n] -> values [R]) on the data (all weights 1) and
    its 95% interval over problem resamples: for a paired difference, a statistic that
    computes both sides from the same weights.

    >>> x = np.arange(40) % 4 == 0  # a mean of 0.25 over 40 items of 20 problems
    >>> str(paired_bootstrap(lambda w: (w * x).sum(1) / w.sum(1),
    ...                      [str(i // 2) for i in range(40)]))
    '+0.250 ± 0.125'
    """
    point = float(statistic(np.ones((1, len(problems))))[0])
    resampled = statistic(problem_resamples(problems, resamples=resamples, seed=seed))
    return problem_bootstrap(point, resampled, problems=len(set(problems)))
