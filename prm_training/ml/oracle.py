"""The oracle a simulation replays: the chains whose labels can answer for an annotator,
split into a pool and held-out chains by problem.
Pure functions of ``ChainExample`` lists (doctests show each)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from .data import ChainExample


def oracle_chains(examples: Sequence[ChainExample]) -> list[ChainExample]:
    """The chains that can serve as the oracle: those with at least one rated step."""
    return [
        example
        for example in examples
        if example.labels is not None and any(rating is not None for rating in example.labels)
    ]


def split_by_problem(
    examples: Sequence[ChainExample], heldout_fraction: float, *, seed: int = 0
) -> tuple[list[ChainExample], list[ChainExample]]:
    """(pool, held-out): whole problems go to the held-out part, in a seeded random order,
    until it holds at least ``heldout_fraction`` of the chains.

    >>> chains = [ChainExample(i, f"p{i // 2}", ("s",), (1,)) for i in range(10)]
    >>> pool, heldout = split_by_problem(chains, 0.3)
    >>> len(heldout), {c.problem for c in pool} & {c.problem for c in heldout}
    (4, set())
    """
    by_problem: dict[str, list[ChainExample]] = defaultdict(list)
    for example in examples:
        by_problem[example.problem.strip()].append(example)
    problems = sorted(by_problem)
    np.random.default_rng(seed).shuffle(problems)
    want = math.ceil(heldout_fraction * len(examples))
    heldout: list[ChainExample] = []
    taken: set[str] = set()
    for problem in problems:
        if len(heldout) >= want:
            break
        heldout.extend(by_problem[problem])
        taken.add(problem)
    pool = [example for example in examples if example.problem.strip() not in taken]
    return pool, heldout


def stops_at_first_error(examples: Sequence[ChainExample]) -> bool:
    """Whether the oracle's labels come from first-error labeling: some chain has an
    error and none rates a step after its first one (ProcessBench), so acquisition
    counts only the steps that would be rated.

    >>> stops_at_first_error([ChainExample(1, "p", ("a", "b"), (-1, None))])
    True
    >>> stops_at_first_error([ChainExample(1, "p", ("a", "b"), (-1, 1))])
    False
    """
    errors = False
    for example in examples:
        labels = example.labels or ()
        if -1 in labels:
            errors = True
            if any(rating is not None for rating in labels[labels.index(-1) + 1 :]):
                return False
    return errors
