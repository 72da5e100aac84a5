"""Held-out metrics against hand-computed values and scikit-learn."""

from __future__ import annotations

import pytest
from sklearn.metrics import roc_auc_score

from prm_training.ml.data import ChainExample
from prm_training.ml.metrics import evaluate
from prm_training.ml.readout import ChainScores


def _chain(chain_id: int, labels: tuple[int | None, ...]) -> ChainExample:
    return ChainExample(chain_id, "p", tuple(f"s{i}" for i in range(len(labels))), labels)


def _scores(chain_id: int, probs: list[float]) -> ChainScores:
    return ChainScores(chain_id=chain_id, step_probs=probs, member_probs=None)


def test_evaluate_matches_hand_computed_values() -> None:
    # Given: three chains with an error, two without, one that does not settle its first
    # error (unrated step before any -1) and one unlabeled
    examples = [
        _chain(1, (1, -1, None)),  # truth 1; predicted 1  -> hit
        _chain(2, (-1, None)),  # truth 0; predicted -1 -> miss
        _chain(3, (1, 1, -1)),  # truth 2; predicted 1  -> miss
        _chain(4, (1, 0, 1)),  # truth none; predicted none -> hit (0 is not an error)
        _chain(5, (1, 1)),  # truth none; predicted 1 -> miss
        _chain(6, (1, None, -1)),  # unsettled: steps count, chain does not
        ChainExample(7, "p", ("s",)),
    ]
    scores = [
        _scores(1, [0.9, 0.2, 0.1]),
        _scores(2, [0.7, 0.3]),
        _scores(3, [0.8, 0.4, 0.3]),
        _scores(4, [0.6, 0.55, 0.95]),
        _scores(5, [0.9, 0.45]),
        _scores(6, [0.5, 0.5, 0.05]),
        _scores(7, [0.5]),
    ]

    # When
    metrics = evaluate(examples, scores)

    # Then: error accuracy 1/3, correct accuracy 1/2, F1 = 2ab/(a+b) = 0.4
    assert metrics["chains_with_error"] == 3 and metrics["chains_without_error"] == 2
    assert metrics["heldout_chains"] == 5
    assert metrics["error_accuracy"] == pytest.approx(1 / 3)
    assert metrics["correct_accuracy"] == pytest.approx(1 / 2)
    assert metrics["processbench_f1"] == pytest.approx(0.4)
    assert metrics["first_error_accuracy"] == pytest.approx(2 / 5)
    # Steps rated +1/-1 only (the 0 and the unrated ones are left out)
    probs = [0.9, 0.2, 0.7, 0.8, 0.4, 0.3, 0.6, 0.95, 0.9, 0.45, 0.5, 0.05]
    labels = [1, 0, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0]
    assert metrics["heldout_steps"] == len(labels)
    assert metrics["step_auroc"] == pytest.approx(roc_auc_score(labels, probs))


def test_processbench_f1_is_left_out_when_one_class_is_missing() -> None:
    metrics = evaluate([_chain(1, (1, 1))], [_scores(1, [0.9, 0.8])])
    assert "processbench_f1" not in metrics and "step_auroc" not in metrics
    assert metrics["correct_accuracy"] == 1.0


def test_scores_must_line_up_with_examples() -> None:
    with pytest.raises(ValueError, match="out of order"):
        evaluate([_chain(1, (1,))], [_scores(2, [0.5])])


def test_the_answer_aware_readout_is_chosen_on_training_chains_and_read_per_grade() -> None:
    # Given: chains whose step probabilities dip everywhere before the error, so one
    # threshold cannot both find the error of wrong answers and leave right answers be
    from prm_training.ml.data import ChainExample
    from prm_training.ml.metrics import choose_readout
    from prm_training.ml.readout import Readout

    def chain(i: int, labels: tuple, correct: bool) -> ChainExample:
        return ChainExample(i, "p", ("a",) * len(labels), labels, answer_correct=correct)

    examples = [chain(i, (1, 1, -1), False) for i in range(10)]
    examples += [chain(10 + i, (1, 1, 1), True) for i in range(10)]
    probs = [(0.9, 0.8, 0.2)] * 10 + [(0.9, 0.8, 0.15)] * 10

    # When
    blind = choose_readout(examples, probs, answer_aware=False)
    aware = choose_readout(examples, probs)

    # Then: the blind threshold must trade one class for the other; the aware readout
    # reads each wrong chain's most likely error and right chains with their own threshold
    assert aware.threshold == blind.threshold and aware.threshold_right is not None
    assert [
        aware.first_error(p, e.answer_correct) for p, e in zip(probs, examples, strict=True)
    ] == ([2] * 10 + [-1] * 10)
    assert (
        sum(
            blind.first_error(p, e.answer_correct) == (2 if i < 10 else -1)
            for i, (p, e) in enumerate(zip(probs, examples, strict=True))
        )
        < 20
    )
    assert Readout(0.5).first_error((0.9, 0.4), False) == 1  # blind: the threshold alone


def test_the_paired_f1_difference_says_no_difference_when_its_interval_holds_zero() -> None:
    from prm_training.ml.metrics import paired_f1_difference

    # Given: two versions that differ on 2 of 200 chains, and two that differ on 60
    base = {i: (i % 2 == 0, i % 3 == 0) for i in range(200)}
    close = {**base, 0: (True, not base[0][1]), 1: (False, not base[1][1])}
    better = {i: (has_error, hit or i < 120) for i, (has_error, hit) in base.items()}

    # When / Then
    near = paired_f1_difference(close, base)
    assert near is not None and near.verdict == "no difference" and near.chains == 200
    far = paired_f1_difference(better, base)
    assert far is not None and far.verdict == "better" and far.low > 0
    assert "over 200 chains: better" in str(far)
    # F1 is undefined without chains of both kinds
    assert paired_f1_difference({1: (True, True)}, {1: (True, False)}) is None
