"""Krippendorff's alpha (ordinal) and first-error agreement on numpy arrays.

Pure numpy, no Django: ``annotation.quality.agreement`` loads the ratings and calls in.
The input is long-format reliability data, one entry per rating:

- ``unit``: the rated unit (a step id), any integers;
- ``coder``: who rated it (an annotator id), any integers;
- ``value``: the rating, -1, 0 or +1.

A unit with fewer than two ratings is not pairable and drops out (Krippendorff's rule), so
a step nobody else rated, or one that nobody rated at all, is missing data: it lowers
nothing. Each (unit, coder) must appear at most once; the caller deduplicates.

The ordinal metric (Krippendorff 2011, "Computing Krippendorff's alpha-reliability"):
delta^2(c, k) = (sum_{g=c..k} n_g - (n_c + n_k) / 2)^2 over the pairable marginals n_g,
so disagreeing -1 vs +1 costs more than -1 vs 0, and a rarely used middle value widens
the gap between its neighbours.

Alpha is None where it is undefined: fewer than two pairable values, or every pairable
value the same (no expected disagreement).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

# Rating -1, 0, +1 -> category 0, 1, 2.
CATEGORIES = 3
IntArray = npt.NDArray[np.int64]


def ordinal_delta(marginals: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The squared ordinal distance matrix for category marginals ``n_g``.

    ``marginals`` has shape (..., C); the result (..., C, C), so one call serves many
    annotator pairs at once.

    >>> ordinal_delta(np.array([1.0, 1.0, 1.0])).tolist()
    [[0.0, 1.0, 4.0], [1.0, 0.0, 1.0], [4.0, 1.0, 0.0]]
    """
    cumulative = np.cumsum(marginals, axis=-1)
    c = np.arange(marginals.shape[-1])
    low = np.minimum.outer(c, c)
    high = np.maximum.outer(c, c)
    before_low = np.where(low > 0, np.take(cumulative, low - 1, axis=-1), 0.0)
    between = np.take(cumulative, high, axis=-1) - before_low
    ends = (marginals[..., :, None] + marginals[..., None, :]) / 2
    return (between - ends) ** 2


def alpha_from_coincidences(o: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Alpha of each coincidence matrix in ``o`` (shape (..., C, C)); NaN where undefined."""
    marginals = o.sum(axis=-1)
    n = marginals.sum(axis=-1)
    delta = ordinal_delta(marginals)
    observed = (o * delta).sum(axis=(-2, -1))
    expected = (marginals[..., :, None] * marginals[..., None, :] * delta).sum(axis=(-2, -1))
    with np.errstate(divide="ignore", invalid="ignore"):
        alpha = 1.0 - (n - 1) * observed / expected
    return np.where((n >= 2) & (expected > 0), alpha, np.nan)


def _maybe(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


@dataclass(frozen=True, slots=True)
class PairAgreement:
    coder_a: int
    coder_b: int
    units: int  # units both rated
    alpha: float | None


@dataclass(frozen=True, slots=True)
class CoderAgreement:
    coder: int
    values: int  # pairable values (ratings of units someone else rated too)
    alpha: float | None


@dataclass(frozen=True, slots=True)
class AlphaResult:
    alpha: float | None
    pairable_values: int
    units: int  # pairable units
    coincidences: list[list[float]]  # o[c][k], categories -1, 0, +1
    coders: list[CoderAgreement]
    pairs: list[PairAgreement]


def _compact(values: IntArray) -> tuple[IntArray, IntArray]:
    """(distinct values, each entry's position among them)."""
    distinct, inverse = np.unique(values, return_inverse=True)
    return distinct, inverse.reshape(-1).astype(np.int64)


def krippendorff_alpha_ordinal(*, unit: IntArray, coder: IntArray, value: IntArray) -> AlphaResult:
    """Alpha over all coders, per coder and per coder pair.

    - **overall**: the textbook alpha, from the coincidence matrix
      o_ck = sum_u (n_uc n_uk - [c = k] n_uc) / (m_u - 1).
    - **per coder**: the overall alpha with the observed disagreement counted only on the
      pairs that involve that coder: D_o(a) is the mean, over a's pairable values, of the
      mean ordinal distance to the other values of the same unit; D_e is the whole data's.
      With two coders it equals the overall alpha, and a coder who disagrees with
      everyone scores low without dragging the others down with them (as "alpha over
      the units a coder rated" would).
    - **per pair**: the textbook alpha of the two coders alone, on the units both rated
      (their own marginals), so it matches any alpha implementation fed just those two.
    """
    unit = np.asarray(unit, dtype=np.int64)
    coder = np.asarray(coder, dtype=np.int64)
    category = np.asarray(value, dtype=np.int64) + 1
    if unit.size and (category.min() < 0 or category.max() >= CATEGORIES):
        raise ValueError("ratings must be -1, 0 or +1")
    _, unit_pos = _compact(unit)
    coder_ids, coder_pos = _compact(coder)
    n_units = int(unit_pos.max()) + 1 if unit.size else 0
    n_coders = coder_ids.size

    # Per unit: how many values of each category (n_uc) and in all (m_u).
    counts = (
        np.bincount(unit_pos * CATEGORIES + category, minlength=n_units * CATEGORIES)
        .reshape(n_units, CATEGORIES)
        .astype(np.float64)
    )
    m = counts.sum(axis=1)
    pairable_unit = m >= 2
    pc = counts[pairable_unit]
    weight = 1.0 / (m[pairable_unit] - 1)
    o = (pc * weight[:, None]).T @ pc - np.diag((pc * weight[:, None]).sum(axis=0))
    alpha = float(alpha_from_coincidences(o))
    marginals = o.sum(axis=1)
    n_pairable = float(marginals.sum())

    # Per coder: each value's mean distance to the unit's other values, under the
    # overall metric, averaged over the coder's pairable values.
    delta = ordinal_delta(marginals)
    row_pairable = pairable_unit[unit_pos]
    others = counts[unit_pos] - np.eye(CATEGORIES)[category]
    with np.errstate(divide="ignore", invalid="ignore"):
        row_disagreement = (others * delta[category]).sum(axis=1) / (m[unit_pos] - 1)
    row_disagreement = np.where(row_pairable, row_disagreement, 0.0)
    coder_sum = np.bincount(coder_pos, weights=row_disagreement, minlength=n_coders)
    coder_values = np.bincount(coder_pos, weights=row_pairable.astype(float), minlength=n_coders)
    expected = (marginals[:, None] * marginals[None, :] * delta).sum()
    coders = []
    for index in range(n_coders):
        coder_alpha: float | None = None
        if coder_values[index] and expected > 0 and n_pairable >= 2:
            observed = coder_sum[index] / coder_values[index]
            coder_alpha = float(1.0 - observed * n_pairable * (n_pairable - 1) / expected)
        coders.append(
            CoderAgreement(
                coder=int(coder_ids[index]), values=int(coder_values[index]), alpha=coder_alpha
            )
        )

    pairs = _pair_alphas(
        unit_pos=unit_pos, coder_pos=coder_pos, category=category, coder_ids=coder_ids
    )
    return AlphaResult(
        alpha=_maybe(alpha),
        pairable_values=int(n_pairable),
        units=int(pairable_unit.sum()),
        coincidences=o.tolist(),
        coders=coders,
        pairs=pairs,
    )


def _within_unit_pairs(*, group: IntArray, member: IntArray) -> tuple[IntArray, IntArray]:
    """Every unordered pair of entries that share a ``group``, as index arrays (i, j) with
    member[i] < member[j]. Sorting by group puts a group's entries side by side, so the
    pairs are the entries d places apart within a run, for d = 1 .. longest run - 1:
    O(entries x largest group), not a Python loop over groups."""
    order = np.lexsort((member, group))
    g = group[order]
    firsts: list[IntArray] = []
    seconds: list[IntArray] = []
    d = 1
    while d < g.size:
        same = g[d:] == g[:-d]
        if not same.any():
            break
        idx = np.nonzero(same)[0]
        firsts.append(order[idx])
        seconds.append(order[idx + d])
        d += 1
    if not firsts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty
    return np.concatenate(firsts), np.concatenate(seconds)


def _pair_alphas(
    *, unit_pos: IntArray, coder_pos: IntArray, category: IntArray, coder_ids: IntArray
) -> list[PairAgreement]:
    i, j = _within_unit_pairs(group=unit_pos, member=coder_pos)
    if i.size == 0:
        return []
    a, b = coder_pos[i], coder_pos[j]
    n_coders = coder_ids.size
    pair_key = a * n_coders + b
    keys, pair_pos = np.unique(pair_key, return_inverse=True)
    pair_pos = pair_pos.reshape(-1)
    # Two coders per unit: m_u = 2, so each shared unit adds o[x][y] and o[y][x] once.
    cells = CATEGORIES * CATEGORIES
    o = (
        np.bincount(
            pair_pos * cells + category[i] * CATEGORIES + category[j], minlength=keys.size * cells
        )
        .reshape(keys.size, CATEGORIES, CATEGORIES)
        .astype(np.float64)
    )
    o = o + o.transpose(0, 2, 1)
    alphas = alpha_from_coincidences(o)
    units = np.bincount(pair_pos, minlength=keys.size)
    return [
        PairAgreement(
            coder_a=int(coder_ids[key // n_coders]),
            coder_b=int(coder_ids[key % n_coders]),
            units=int(units[p]),
            alpha=_maybe(alphas[p]),
        )
        for p, key in enumerate(keys.tolist())
    ]


@dataclass(frozen=True, slots=True)
class FirstErrorAgreement:
    """Share of annotator pairs on the same chain that put the first error at the same
    step (-1, "no error", is a position too)."""

    share: float | None
    pairs: int
    # (coder a, coder b) -> (pairs that agree, pairs)
    by_pair: dict[tuple[int, int], tuple[int, int]]
    # coder -> (pairs that agree, pairs)
    by_coder: dict[int, tuple[int, int]]


def first_error_positions(
    *, chain: IntArray, coder: IntArray, step_index: IntArray, value: IntArray
) -> tuple[IntArray, IntArray, IntArray]:
    """Per (chain, coder) present in the data: the index of the first step rated -1, or -1
    when none is. Returns (chain, coder, first error) arrays. The "stated" reading of
    ``annotation.first_error`` over columns of ratings, vectorized: agreement reads a
    project's every rating at once, not one chain's list.

    >>> [a.tolist() for a in first_error_positions(chain=np.array([7, 7, 7, 7]),
    ...     coder=np.array([1, 1, 2, 2]), step_index=np.array([0, 1, 0, 1]),
    ...     value=np.array([1, -1, 1, 1]))]
    [[7, 7], [1, 2], [1, -1]]
    """
    chain = np.asarray(chain, dtype=np.int64)
    coder = np.asarray(coder, dtype=np.int64)
    step_index = np.asarray(step_index, dtype=np.int64)
    if chain.size == 0:
        return chain, coder, chain.copy()
    # One int64 key per pass: np.unique on a 1-D array is far faster than with axis=0.
    coder_ids, coder_pos = _compact(coder)
    pass_keys, pass_pos = _compact(chain * coder_ids.size + coder_pos)
    sentinel = np.iinfo(np.int64).max
    first = np.full(pass_keys.size, sentinel, dtype=np.int64)
    wrong = np.asarray(value) == -1
    np.minimum.at(first, pass_pos[wrong], step_index[wrong])
    first[first == sentinel] = -1
    return pass_keys // coder_ids.size, coder_ids[pass_keys % coder_ids.size], first


def first_error_agreement(
    *, chain: IntArray, coder: IntArray, step_index: IntArray, value: IntArray
) -> FirstErrorAgreement:
    chains, coders, first = first_error_positions(
        chain=chain, coder=coder, step_index=step_index, value=value
    )
    i, j = _within_unit_pairs(group=chains, member=coders)
    same = first[i] == first[j]
    by_pair: dict[tuple[int, int], tuple[int, int]] = {}
    by_coder: dict[int, tuple[int, int]] = {}
    if i.size:
        coder_ids, coder_pos = _compact(coders)
        width = coder_ids.size
        distinct, pos = _compact(coder_pos[i] * width + coder_pos[j])
        agree = np.bincount(pos, weights=same, minlength=distinct.size)
        total = np.bincount(pos, minlength=distinct.size)
        for key, k, n in zip(distinct.tolist(), agree.tolist(), total.tolist(), strict=True):
            by_pair[(int(coder_ids[key // width]), int(coder_ids[key % width]))] = (int(k), int(n))
        both = np.concatenate([coders[i], coders[j]])
        both_same = np.concatenate([same, same])
        ids, pos = np.unique(both, return_inverse=True)
        agree = np.bincount(pos.reshape(-1), weights=both_same, minlength=ids.size)
        total = np.bincount(pos.reshape(-1), minlength=ids.size)
        for c, k, n in zip(ids.tolist(), agree.tolist(), total.tolist(), strict=True):
            by_coder[int(c)] = (int(k), int(n))
    pairs = int(i.size)
    return FirstErrorAgreement(
        share=float(same.mean()) if pairs else None,
        pairs=pairs,
        by_pair=by_pair,
        by_coder=by_coder,
    )
