"""Paired comparisons over seeds: a learning result is a claim about noise.

Every strategy of a seed shares that seed's held-out split and random seed set, so the
comparison with the reference (``random``) is the per-seed difference, and its 95%
interval is Student's t over seeds. A difference whose interval holds 0 is "no
difference", whatever its mean says.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Interval:
    mean: float
    half_width: float  # 95%; inf with fewer than two values
    n: int

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

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
        return f"{self.mean:+.3f} ± {self.half_width:.3f}"


def interval(values: Sequence[float]) -> Interval:
    """Mean and 95% half-width (Student's t) of ``values``, NaNs left out.

    >>> str(interval([0.01, 0.03, 0.02, 0.04]))
    '+0.025 ± 0.021'
    >>> interval([0.01, 0.03, 0.02, 0.04]).verdict
    'better'
    """
    from scipy import stats

    array = np.asarray([v for v in values if not math.isnan(v)], dtype=np.float64)
    if array.size == 0:
        return Interval(math.nan, math.inf, 0)
    if array.size == 1:
        return Interval(float(array[0]), math.inf, 1)
    sem = float(array.std(ddof=1)) / math.sqrt(array.size)
    return Interval(
        float(array.mean()), float(stats.t.ppf(0.975, array.size - 1)) * sem, array.size
    )


def seeds_needed(differences: Sequence[float], effect: float) -> int | None:
    """Seeds for a 95% half-width of ``effect`` at the spread of ``differences`` (None when
    there are fewer than two).

    >>> seeds_needed([0.0, 0.05, -0.05, 0.02, -0.02], 0.02)
    17
    """
    from scipy import stats

    array = np.asarray([v for v in differences if not math.isnan(v)], dtype=np.float64)
    if array.size < 2:
        return None
    sd = float(array.std(ddof=1))
    n = 2
    while float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n) > effect and n < 10_000:
        n += 1
    return n
