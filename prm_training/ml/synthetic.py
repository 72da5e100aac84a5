"""Synthetic chains with a learnable step signal, for unit tests, benchmarks and smoke
runs: a step is incorrect exactly when it contains the word "wrong", and labels follow the
first_error convention's spirit (every step rated, -1 on the marked ones)."""

from __future__ import annotations

import numpy as np

from .data import ChainExample

WORDS = (
    "add",
    "the",
    "two",
    "numbers",
    "then",
    "divide",
    "by",
    "three",
    "so",
    "we",
    "get",
    "multiply",
    "both",
    "sides",
    "subtract",
    "four",
    "from",
    "each",
    "term",
    "hence",
    "value",
    "equals",
    "five",
    "six",
    "seven",
    "square",
    "root",
    "of",
    "sum",
    "total",
)
ERROR_WORD = "wrong"


def synthetic_chains(
    count: int,
    *,
    seed: int = 0,
    steps: tuple[int, int] = (2, 6),
    words_per_step: tuple[int, int] = (3, 8),
    error_rate: float = 0.25,
    labeled: bool = True,
    first_id: int = 1,
) -> list[ChainExample]:
    """``count`` chains; each step independently contains ``ERROR_WORD`` (and is rated -1)
    with probability ``error_rate``, else it is rated +1."""
    rng = np.random.default_rng(seed)
    chains: list[ChainExample] = []
    for offset in range(count):
        n_steps = int(rng.integers(steps[0], steps[1] + 1))
        texts: list[str] = []
        labels: list[int | None] = []
        for _ in range(n_steps):
            words = list(rng.choice(WORDS, size=int(rng.integers(*words_per_step))))
            wrong = bool(rng.random() < error_rate)
            if wrong:
                words.insert(int(rng.integers(0, len(words) + 1)), ERROR_WORD)
            texts.append(" ".join(words))
            labels.append(-1 if wrong else 1)
        problem = "what is the " + " ".join(rng.choice(WORDS, size=5))
        chains.append(
            ChainExample(
                chain_id=first_id + offset,
                problem=problem,
                steps=tuple(texts),
                labels=tuple(labels) if labeled else None,
            )
        )
    return chains
