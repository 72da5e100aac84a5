"""The benchmarks' own figures (``prm_training.ml.evaluation``): ProcessBench's F1 per
subset and their mean, PRMBench's PRMScore, "right answer, flawed process", and the
report with problem-bootstrap intervals against the strongest baseline."""

from __future__ import annotations

import numpy as np
import pytest

from prm_training.ml.data import ChainExample
from prm_training.ml.evaluation import (
    evaluation_report,
    point_metrics,
    scored_chains,
    subset_of,
)
from prm_training.ml.metrics import evaluate
from prm_training.ml.readout import ChainScores, Readout


def _chain(
    chain_id: int, error_at: int | None, *, subset: str, right: bool, n: int = 4
) -> ChainExample:
    """A first-error labeled chain of ``n`` steps (nothing rated after the error)."""
    if error_at is None:
        labels: tuple[int | None, ...] = (1,) * n
    else:
        labels = (1,) * error_at + (-1,) + (None,) * (n - error_at - 1)
    return ChainExample(
        chain_id,
        f"problem {chain_id // 2}",
        tuple(f"step {i}" for i in range(n)),
        labels,
        answer_correct=right,
        subset=subset,
    )


def _finds(example: ChainExample, found: bool) -> list[float]:
    """Step probabilities whose 0.5 threshold finds the chain's first error (or its
    absence) when ``found``, and calls its first step wrong otherwise."""
    labels = example.labels or ()
    truth = next((i for i, r in enumerate(labels) if r == -1), -1)
    if not found:
        return [0.1] + [0.9] * (len(labels) - 1) if truth != 0 else [0.9] * len(labels)
    return [0.9 if i != truth else 0.1 for i in range(len(labels))]


def test_f1_is_reported_per_subset_and_as_their_mean() -> None:
    # Given: a subset of 40 chains the scorer reads perfectly, and one of 10 it reads at
    # chance (it finds the first error in every other chain)
    easy = [_chain(i, None if i % 2 else 2, subset="easy", right=i % 2 == 1) for i in range(40)]
    hard = [
        _chain(100 + i, None if i % 2 else 1, subset="hard", right=i % 2 == 1) for i in range(10)
    ]
    chains = easy + hard
    probs = [_finds(c, True) for c in easy] + [_finds(c, i % 4 < 2) for i, c in enumerate(hard)]

    # When
    figures = point_metrics(scored_chains(chains, probs, Readout(0.5)))

    # Then: each subset's F1 is the F1 of its own chains, the mean weighs the subsets
    # alike (ProcessBench's reporting), while the pooled F1 is dominated by the big subset
    def alone(subset: list[ChainExample], p: list[list[float]]) -> float:
        scores = [ChainScores(c.chain_id, q, None) for c, q in zip(subset, p, strict=True)]
        return evaluate(subset, scores, Readout(0.5))["processbench_f1"]

    assert figures["subset_f1:easy"] == 1.0
    assert figures["subset_f1:hard"] == pytest.approx(alone(hard, probs[40:]))
    assert figures["mean_subset_f1"] == pytest.approx((1.0 + figures["subset_f1:hard"]) / 2)
    assert figures["f1"] > figures["mean_subset_f1"]
    # and ``evaluate`` carries them for every run's metrics
    scores = [ChainScores(c.chain_id, p, None) for c, p in zip(chains, probs, strict=True)]
    metrics = evaluate(chains, scores, Readout(0.5))
    assert metrics["mean_subset_f1"] == pytest.approx(figures["mean_subset_f1"])
    assert metrics["subset_f1:hard"] == pytest.approx(figures["subset_f1:hard"])


def test_prmscore_needs_labels_past_the_first_error() -> None:
    # Given: the same steps labeled fully (every step rated, as PRMBench does) and by
    # first error (nothing after it)
    full = ChainExample(1, "p", ("a", "b", "c", "d"), (1, -1, 1, -1), subset="x")
    clean = ChainExample(2, "q", ("a", "b"), (1, 1), subset="x")
    first_error = ChainExample(1, "p", ("a", "b", "c", "d"), (1, -1, None, None), subset="x")
    probs = [[0.9, 0.2, 0.4, 0.3], [0.8, 0.7]]

    # When
    with_full = point_metrics(scored_chains([full, clean], probs, Readout(0.5)))
    with_first = point_metrics(scored_chains([first_error, clean], probs, Readout(0.5)))

    # Then: PRMScore is 0.5 F1 on correct steps + 0.5 F1 on wrong ones (3 correct steps
    # called correct, 2 wrong ones called wrong, one mistake: step c, correct but at 0.4);
    # first-error labels leave only error-free chains fully rated, so it is not given
    assert with_full["prmscore"] == pytest.approx(0.5 * (6 / 7) + 0.5 * (4 / 5))
    assert "prmscore" not in with_first


def test_right_answer_flawed_process_counts_errors_found_in_right_answers() -> None:
    # Given: chains whose final answer is right though a step is wrong, and a scorer that
    # reads only the answer (no error where the answer is right) against one that finds
    # half of them
    chains = [_chain(i, 1, subset="s", right=True) for i in range(20)]
    chains += [_chain(20 + i, None, subset="s", right=True) for i in range(20)]
    answer_only = [[0.9] * 4 for _ in chains]
    finder = [_finds(c, i % 2 == 0 or i >= 20) for i, c in enumerate(chains)]

    # When / Then
    blind = point_metrics(scored_chains(chains, answer_only, Readout(0.5)))
    found = point_metrics(scored_chains(chains, finder, Readout(0.5)))
    assert blind["right_answer_recall"] == 0.0
    assert found["right_answer_recall"] == pytest.approx(0.5)


def test_the_report_compares_the_model_with_the_strongest_baseline_per_figure() -> None:
    # Given: 120 chains of 60 problems; a model that finds 90% of the first errors, a
    # baseline that finds 60%, another 30%
    rng = np.random.default_rng(0)
    chains = [
        _chain(i, None if i % 3 == 0 else int(rng.integers(0, 4)), subset="ab"[i % 2], right=False)
        for i in range(120)
    ]

    def scorer(rate: float) -> tuple[list[list[float]], Readout]:
        return [_finds(c, rng.random() < rate) for c in chains], Readout(0.5)

    # When
    report = evaluation_report(
        chains,
        {"model": scorer(0.9), "weak": scorer(0.3), "fair": scorer(0.6)},
        resamples=300,
    )

    # Then: the strongest baseline is the fair one, the model beats it with an interval
    # above zero, and every figure has a 95% interval around its value
    assert report["chains"] == 120 and report["problems"] == 60
    assert [s["name"] for s in report["subsets"]] == ["a", "b"]
    assert report["strongest"]["mean_subset_f1"] == "fair"
    gap = report["versus_strongest"]["mean_subset_f1"]
    assert gap["low"] > 0
    for figure in ("f1", "mean_subset_f1", "subset_f1:a", "auroc", "first_error_accuracy"):
        value = report["scores"]["model"][figure]
        assert value["low"] <= value["mean"] <= value["high"], figure


@pytest.mark.parametrize(
    ("stated", "record_id", "source", "subset"),
    [
        (None, "gsm8k-12", "all.json", "gsm8k"),
        (None, "olympiadbench-3", "", "olympiadbench"),
        ("omnimath", "math-1", "", "omnimath"),
        (None, 17, "uploads/math.json", "math"),
        (None, None, "", ""),
    ],
)
def test_a_chain_s_subset_comes_from_its_metadata_or_its_file(
    stated: object, record_id: object, source: str, subset: str
) -> None:
    assert subset_of(stated=stated, record_id=record_id, source=source) == subset
