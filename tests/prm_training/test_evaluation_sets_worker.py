"""Evaluation sets on a real worker: the training task measures the new version on each of
the project's sets and publishes the figures with it; the project's rule keeps a version
that was not measured everywhere from becoming active."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from prm_worker import WorkerFactory, wait_until

from annotation.datasets.evaluation_sets import evaluation_set_mark
from annotation.models import Chain, SnapshotChain, SnapshotSplit
from prm_training.models import (
    EvaluationResult,
    ModelVersion,
    ProjectTrainingSettings,
    RunStatus,
    TrainingRun,
)
from prm_training.services.training import training_run_start
from tests.factories import ImportBatchFactory
from tests.prm_training.ml_tiny import tiny_settings

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _held_out(project: Any, chain_ids: list[int], filename: str) -> int:
    """The chains, moved into an import of their own and marked as an evaluation set."""
    batch = ImportBatchFactory(project=project, filename=filename)
    Chain.objects.filter(pk__in=chain_ids).update(import_batch=batch)
    return evaluation_set_mark(project=project, import_batch_id=batch.pk).pk


def test_a_run_measures_its_version_on_every_set_and_the_rule_holds_back_an_unmeasured_one(
    celery_workers: WorkerFactory, arithmetic_project: Any, make_member: Any, tiny_bert_dir: Path
) -> None:
    # Given 12 of the 30 labeled chains held out (two subsets), the 20 unlabeled ones held
    # out as a second set, and the project's rule on
    project = arithmetic_project
    labeled = sorted(
        Chain.objects.filter(project=project, is_finished=True).values_list("pk", flat=True)
    )
    held = labeled[-12:]
    for k, chain_id in enumerate(held):
        Chain.objects.filter(pk=chain_id).update(meta={"subset": "gsm8k" if k < 6 else "math"})
    scored_set = _held_out(project, held, "unseen.jsonl")
    unlabeled_set = _held_out(project, project.unlabeled_ids, "unlabeled.jsonl")
    ProjectTrainingSettings.objects.create(project=project, promotion_needs_evaluation_sets=True)
    worker = celery_workers.start()

    # When ML staff train a version
    run = training_run_start(
        project=project, user=make_member(project, "ml"), settings=tiny_settings(tiny_bert_dir)
    )
    wait_until(
        lambda: TrainingRun.objects.get(pk=run.pk).is_finished,
        timeout=300,
        what="the training run",
        diagnose=worker.output,
    )
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error

    # Then it trained on none of the held-out chains
    trained = set(
        SnapshotChain.objects.filter(snapshot=run.snapshot).values_list("chain_id", flat=True)
    )
    assert set(held) <= trained  # the snapshot holds them: the training path left them out
    version = ModelVersion.objects.get(training_run=run)
    kept = json.loads((Path(version.checkpoint_dir) / "config.json").read_text())
    assert kept["train_chains"] + kept["heldout_chains"] == 18

    # And the version's figures on the labeled set are stored, per subset, beside the
    # baselines its checkpoint kept, with the paired interval against the strongest
    result = EvaluationResult.objects.get(model_version=version, evaluation_set_id=scored_set)
    assert (result.chains, result.unlabeled_chains) == (12, 0)
    report = result.report
    assert [s["name"] for s in report["subsets"]] == ["gsm8k", "math"]
    assert {"model", "position_prior", "outcome_rule", "text_blind"} <= set(report["scores"])
    assert {"subset_f1:gsm8k", "subset_f1:math", "mean_subset_f1", "auroc"} <= set(
        report["scores"]["model"]
    )
    assert "subset_f1:gsm8k" in report["versus_strongest"]
    assert result.truncation["truncated_chains"] == 0
    assert result.loses in (True, False)

    # And on the unlabeled set it scored nothing, so the rule keeps the version inactive
    empty = EvaluationResult.objects.get(model_version=version, evaluation_set_id=unlabeled_set)
    assert (empty.chains, empty.unlabeled_chains, empty.loses) == (0, 20, None)
    assert not version.is_active
    assert "unlabeled.jsonl" in run.activation_note, run.activation_note
    assert "Measured on 2 evaluation set(s)" in run.activation_note


def _trained(project: Any, user: Any, tiny_bert_dir: Path, worker: Any) -> ModelVersion:
    run = training_run_start(project=project, user=user, settings=tiny_settings(tiny_bert_dir))
    wait_until(
        lambda: TrainingRun.objects.get(pk=run.pk).is_finished,
        timeout=300,
        what="the training run",
        diagnose=worker.output,
    )
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    return ModelVersion.objects.get(training_run=run)


def test_the_next_run_also_measures_the_active_version_on_a_set_marked_after_it(
    celery_workers: WorkerFactory, arithmetic_project: Any, make_member: Any, tiny_bert_dir: Path
) -> None:
    # Given v1, active, trained before any evaluation set existed
    project = arithmetic_project
    ml = make_member(project, "ml")
    worker = celery_workers.start()
    first = _trained(project, ml, tiny_bert_dir, worker)
    assert first.is_active and not first.evaluation_results.exists()
    # When a lead holds 12 labeled chains out and ML staff train again
    labeled = sorted(
        Chain.objects.filter(project=project, is_finished=True).values_list("pk", flat=True)
    )
    held = _held_out(project, labeled[-12:], "later.jsonl")
    second = _trained(project, ml, tiny_bert_dir, worker)
    # Then both versions have figures on the set: v2 on its 12 chains, v1 only on those it
    # did not train on (its snapshot's held-out ones)
    results = {
        r.model_version_id: r for r in EvaluationResult.objects.filter(evaluation_set_id=held)
    }
    assert set(results) == {first.pk, second.pk}
    assert results[second.pk].chains == 12
    unseen_by_first = SnapshotChain.objects.filter(
        snapshot=first.snapshot, split=SnapshotSplit.HELDOUT, chain_id__in=labeled[-12:]
    ).count()
    assert results[first.pk].chains == unseen_by_first < 12
    assert ("model" in results[first.pk].report.get("scores", {})) == (unseen_by_first > 0)
