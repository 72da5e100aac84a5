"""Acquisition functions and batch selection on hand-made scores."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prm_training.ml.acquisition import (
    STRATEGIES,
    acquisition_scores,
    select_batch,
)
from prm_training.ml.readout import ChainScores, first_error_distribution


def _s(chain_id: int, probs: list[float], members: list[list[float]] | None = None) -> ChainScores:
    return ChainScores(chain_id=chain_id, step_probs=probs, member_probs=members)


CONFIDENT = _s(1, [0.99, 0.99, 0.01], [[0.99, 0.99, 0.01], [0.99, 0.99, 0.01]])
UNSURE = _s(2, [0.5, 0.5, 0.5], [[0.5, 0.5, 0.5], [0.5, 0.5, 0.5]])
SPLIT = _s(3, [0.5, 0.5, 0.5], [[0.95, 0.95, 0.95], [0.05, 0.05, 0.05]])


def test_entropy_prefers_the_unsure_chain() -> None:
    scores = acquisition_scores("entropy", [CONFIDENT, UNSURE], rng=np.random.default_rng(0))
    assert scores[1] == pytest.approx(math.log(2))
    assert scores[0] < 0.1


def test_first_error_distribution_sums_to_one_and_entropy_matches_by_hand() -> None:
    dist = first_error_distribution([0.5, 0.5, 0.5])
    assert dist.tolist() == [0.5, 0.25, 0.125, 0.125]
    scores = acquisition_scores(
        "first_error_entropy", [UNSURE, CONFIDENT], rng=np.random.default_rng(0)
    )
    # per rated step: all three under all-steps labeling
    expected = -sum(p * math.log(p) for p in dist)
    assert scores[0] == pytest.approx(expected / 3)
    assert scores[1] < scores[0]
    # under first-error labeling 1 + 0.5 + 0.25 steps are rated on average
    [first_error] = acquisition_scores(
        "first_error_entropy", [UNSURE], first_error_labeling=True, rng=np.random.default_rng(0)
    )
    assert first_error == pytest.approx(expected / 1.75)


@pytest.mark.parametrize("strategy", ["entropy", "disagreement"])
def test_under_first_error_labeling_steps_nobody_will_rate_do_not_count(strategy: str) -> None:
    # Given: two chains alike in their first step, which the PRM calls wrong; after it one
    # chain has three steps the PRM is unsure of, the other one sure step
    members = [[0.02, 0.9, 0.1, 0.9], [0.02, 0.1, 0.9, 0.1]]
    doubtful_tail = _s(1, [0.02, 0.5, 0.5, 0.5], members)
    sure_tail = _s(2, [0.02, 0.99], [[0.02, 0.99], [0.02, 0.99]])

    # When
    def priority(first_error_labeling: bool) -> np.ndarray:
        return acquisition_scores(
            strategy,
            [doubtful_tail, sure_tail],
            first_error_labeling=first_error_labeling,
            rng=np.random.default_rng(0),
        )

    # Then: counting every step prefers the doubtful tail by far; counting the steps an
    # annotator stopping at the first error would rate, the gap is under a tenth of that
    every_step = priority(False)
    rated = priority(True)
    assert every_step[0] > 3 * every_step[1]
    assert 0 <= rated[0] - rated[1] < 0.1 * (every_step[0] - every_step[1])


def test_disagreement_separates_members_that_disagree_from_members_that_agree() -> None:
    # Same mean probabilities (entropy cannot tell them apart), different agreement
    scores = acquisition_scores("disagreement", [UNSURE, SPLIT], rng=np.random.default_rng(0))
    assert scores[0] == pytest.approx(0.0, abs=1e-9)
    p = 0.95
    expected = math.log(2) + (p * math.log(p) + (1 - p) * math.log(1 - p))
    assert scores[1] == pytest.approx(expected)


def test_disagreement_without_members_is_refused() -> None:
    with pytest.raises(ValueError, match="ensemble"):
        acquisition_scores("disagreement", [_s(9, [0.5])], rng=np.random.default_rng(0))


def test_convincing_wrong_ranks_confident_wrong_answers_first() -> None:
    chains = [_s(1, [0.9, 0.8]), _s(2, [0.9, 0.3]), _s(3, [0.95, 0.95]), _s(4, [0.5, 0.5])]
    answers = [False, False, True, None]
    scores = acquisition_scores(
        "convincing_wrong", chains, answers_correct=answers, rng=np.random.default_rng(0)
    )
    assert list(np.argsort(-scores)) == [0, 1, 3, 2]
    assert scores[0] == pytest.approx(2.8)
    with pytest.raises(ValueError, match="answers_correct"):
        acquisition_scores("convincing_wrong", chains, rng=np.random.default_rng(0))


def test_unknown_strategy_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown strategy"):
        acquisition_scores("bald", [UNSURE], rng=np.random.default_rng(0))


def test_select_batch_mixes_top_scores_with_a_random_share() -> None:
    # Given: 100 chains whose entropy rises with their index
    chains = [_s(i, [0.5 + 0.49 * (1 - i / 99)]) for i in range(100)]

    # When: 10 are chosen with 20% random
    picked = select_batch("entropy", chains, 10, random_fraction=0.2, rng=np.random.default_rng(1))

    # Then: the 8 most uncertain first, then 2 distinct others
    assert picked[:8] == list(range(99, 91, -1))
    assert len(set(picked)) == 10
    assert not set(picked[8:]) & set(range(92, 100))


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_select_batch_never_repeats_and_caps_at_available(strategy: str) -> None:
    chains = [CONFIDENT, UNSURE, SPLIT]
    picked = select_batch(
        strategy, chains, 10, answers_correct=[False, True, None], rng=np.random.default_rng(0)
    )
    assert sorted(picked) == [0, 1, 2]


def test_select_batch_is_reproducible_with_the_same_seed() -> None:
    chains = [_s(i, [0.5]) for i in range(50)]
    a = select_batch("random", chains, 5, rng=np.random.default_rng(3))
    b = select_batch("random", chains, 5, rng=np.random.default_rng(3))
    assert a == b and len(set(a)) == 5


def test_a_batch_takes_every_problem_s_best_chain_before_a_second_one() -> None:
    # Given: three unsure chains of problem A, a less unsure one of B and a sure one of C
    scores = [_s(1, [0.5] * 3), _s(2, [0.5] * 3), _s(3, [0.45] * 3), _s(4, [0.8] * 3)]
    scores.append(_s(5, [0.99] * 3))
    problems = ["A", "A", "A", "B", "C"]

    # When: three are picked by entropy, with and without the problems
    def pick(groups: list[str] | None) -> list[int]:
        return select_batch(
            "entropy", scores, 3, random_fraction=0.0, groups=groups, rng=np.random.default_rng(1)
        )

    # Then: without them A takes the whole batch; with them A, B and C each give one
    assert sorted(pick(None)) == [0, 1, 2]
    chosen = pick(problems)
    assert sorted(problems[i] for i in chosen) == ["A", "B", "C"]
    assert chosen[0] in (0, 1)  # A's best first: the two at 0.5 tie, broken at random
