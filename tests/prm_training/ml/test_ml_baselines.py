"""The baselines a PRM must beat: the outcome-only rule, the step-position prior and the
text-blind head, their place in a training run's metrics and checkpoint, and the verdict
against the strongest of them."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from prm_training.ml.baselines import (
    baseline_metrics,
    baseline_step_probs,
    fit_outcome_rule,
    graded_answers,
    load_baselines,
    scored_baseline_metrics,
    verdict_against_baselines,
)
from prm_training.ml.config import PRMConfig
from prm_training.ml.data import ChainExample
from prm_training.ml.launch import train_prm
from prm_training.ml.synthetic import synthetic_chains
from tests.prm_training.ml_tiny import tiny_backbone_dir


def _chain(chain_id: int, n: int, error_at: int | None) -> ChainExample:
    """A chain of ``n`` steps, wrong from ``error_at`` on (ProcessBench's labels: nothing
    rated after the first error), whose final answer is right exactly when it has none."""
    if error_at is None:
        labels: tuple[int | None, ...] = (1,) * n
    else:
        labels = (1,) * error_at + (-1,) + (None,) * (n - error_at - 1)
    return ChainExample(
        chain_id,
        f"problem {chain_id}",
        tuple(f"step {i}" for i in range(n)),
        labels,
        answer="7" if error_at is None else "8",
        reference_answer="7",
    )


def test_the_outcome_rule_is_exact_when_errors_sit_at_the_last_step() -> None:
    # Given: chains whose only error is always their last step, and graded answers
    chains = [_chain(i, 3 + i % 4, None if i % 2 else 2 + i % 4) for i in range(40)]
    graded = graded_answers(chains)

    # When fitted on half and scored on the other half, read with the final answer's grade
    # and without it
    metrics = baseline_metrics(chains[:20], chains[20:], graded)
    blind = baseline_metrics(chains[:20], chains[20:], graded, answer_aware=False)

    # Then the rule reading only the final answer is perfect either way; the prior is
    # not without the grade, and is with it (a wrong answer's error goes where errors
    # are most likely, here the last step)
    assert fit_outcome_rule(chains[:20], graded).from_end is True
    assert metrics["outcome_rule"]["processbench_f1"] == 1.0
    assert blind["outcome_rule"]["processbench_f1"] == 1.0
    assert blind["position_prior"]["processbench_f1"] < 1.0
    assert metrics["position_prior"]["processbench_f1"] == 1.0


def test_an_ungraded_chain_falls_back_on_the_position_prior() -> None:
    chains = [_chain(i, 4, 3) for i in range(6)] + [_chain(9, 4, None)]
    ungraded = replace(chains[0], chain_id=99, answer="")

    probs = baseline_step_probs("outcome_rule", chains, [ungraded], graded_answers(chains))

    assert probs == baseline_step_probs("position_prior", chains, [ungraded], {})


def test_unknown_baseline_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown baseline 'oracle'"):
        baseline_step_probs("oracle", [], [], {})


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_backbone_dir(tmp_path_factory.mktemp("baselines-backbone"), "bert")


def test_a_training_run_reports_the_baselines_on_its_heldout_chains(
    tiny_bert: Path, tmp_path: Path
) -> None:
    # Given: synthetic chains split into training and held-out chains
    chains = synthetic_chains(60, seed=4, steps=(2, 4), words_per_step=(3, 5))
    train, heldout = chains[:45], chains[45:]
    config = PRMConfig(
        backbone=str(tiny_bert),
        head_epochs=5,
        head_hidden=16,
        ensemble_size=2,
        max_length=64,
        device="cpu",
        report_every_s=0.0,
    )

    # When trained
    metrics = train_prm(config, train, heldout, tmp_path / "prm").metrics

    # Then its metrics carry the position prior fitted on the same training chains, and
    # not the outcome rule: no final answer here can be graded (no reference answers)
    expected = baseline_metrics(train, heldout, graded_answers(chains))["position_prior"]
    for metric in ("processbench_f1", "step_auroc", "first_error_accuracy"):
        if metric in expected:
            assert metrics[f"baseline_position_prior_{metric}"] == pytest.approx(expected[metric])
    assert "baseline_position_prior_step_auroc" in metrics
    assert not [key for key in metrics if key.startswith("baseline_outcome_rule")]


def test_a_training_run_with_graded_answers_reports_the_outcome_rule(
    tiny_bert: Path, tmp_path: Path
) -> None:
    # Given: chains whose final answers can be graded against their reference answers
    chains = [_chain(i, 3 + i % 3, None if i % 2 else 2 + i % 3) for i in range(40)]
    config = PRMConfig(
        backbone=str(tiny_bert),
        head_epochs=3,
        head_hidden=16,
        ensemble_size=2,
        max_length=64,
        device="cpu",
        report_every_s=0.0,
    )

    # When trained
    metrics = train_prm(config, chains[:30], chains[30:], tmp_path / "prm").metrics

    # Then the outcome rule is there, and exact on these chains (errors at the last step)
    assert metrics["baseline_outcome_rule_processbench_f1"] == 1.0


def test_the_text_blind_head_reads_everything_but_the_step(tiny_bert: Path, tmp_path: Path) -> None:
    # Given: graded chains whose error is always the last step of a wrong answer: what the
    # answer's grade and the step's place say, without a word of the step
    chains = [_chain(i, 3 + i % 3, None if i % 2 else 2 + i % 3) for i in range(60)]
    train, heldout = chains[:40], chains[40:]
    config = PRMConfig(
        backbone=str(tiny_bert),
        head_epochs=30,
        head_hidden=16,
        ensemble_size=2,
        max_length=64,
        device="cpu",
        report_every_s=0.0,
    )

    # When trained, and its checkpoint's baselines read back
    result = train_prm(config, train, heldout, tmp_path / "prm")
    fitted = load_baselines(tmp_path / "prm")

    # Then: the text-blind head is in the run's metrics and learns the rule from the
    # answer's grade and the steps' places
    assert result.metrics["baseline_text_blind_processbench_f1"] >= 0.9
    # And the checkpoint keeps every baseline, which scores held-out chains as the run did
    assert fitted is not None and fitted.text_blind is not None
    again = scored_baseline_metrics(fitted, heldout)
    for name in ("text_blind", "outcome_rule", "position_prior"):
        key = f"baseline_{name}_processbench_f1"
        assert again[key] == pytest.approx(result.metrics[key])
    # And it reads no step: other words in every step change none of its scores
    reworded = [replace(c, steps=tuple("other words" for _ in c.steps)) for c in heldout]
    probs, _ = fitted.scorers(heldout)["text_blind"]
    assert fitted.scorers(reworded)["text_blind"][0] == probs
    # And the report holds the PRM against the strongest baseline, with intervals
    assert result.report is not None
    assert set(result.report["scores"]) == {"model", "outcome_rule", "position_prior", "text_blind"}
    assert "mean_subset_f1" in result.report["versus_strongest"]


def test_beating_the_baselines_means_beating_the_strongest_with_its_interval() -> None:
    # Given: a version ahead of the rules but not of the text-blind head on F1, then one
    # ahead of all three on both figures but with an F1 interval that holds zero, then one
    # whose intervals lie above zero
    rules = {
        "baseline_outcome_rule_processbench_f1": 0.30,
        "baseline_outcome_rule_step_auroc": 0.70,
        "baseline_position_prior_processbench_f1": 0.30,
        "baseline_position_prior_step_auroc": 0.55,
        "baseline_text_blind_processbench_f1": 0.38,
        "baseline_text_blind_step_auroc": 0.74,
    }
    behind = {**rules, "processbench_f1": 0.36, "step_auroc": 0.76}
    unsure = {
        **rules,
        "processbench_f1": 0.40,
        "step_auroc": 0.76,
        "vs_strongest_processbench_f1_low": -0.01,
        "vs_strongest_processbench_f1_high": 0.05,
        "vs_strongest_step_auroc_low": 0.01,
        "vs_strongest_step_auroc_high": 0.03,
    }
    ahead = {**unsure, "vs_strongest_processbench_f1_low": 0.005}

    # When / Then
    assert verdict_against_baselines(behind).beaten is False
    assert "the text-blind head" in verdict_against_baselines(behind).text
    assert verdict_against_baselines(unsure).beaten is False
    assert "no difference" in verdict_against_baselines(unsure).text
    assert verdict_against_baselines(ahead).beaten is True
    assert verdict_against_baselines({}).beaten is None
