"""Evaluation runs on a real Celery worker (Redis, PostgreSQL, the tiny BERT): a set marked
after a version was made gets that version's figures without another training run, and
when a lead changes the set's chains in the data manager the figures are dropped and
measured again on the chains it holds now; when a lead rules on one of its chains, they
are measured again on labels frozen after the ruling."""

from __future__ import annotations

from typing import Any

import pytest
from prm_worker import WorkerFactory, wait_until

from annotation.datasets.evaluation_sets import (
    chains_evaluation_set_remove,
    evaluation_set_mark_chains,
)
from annotation.models import Chain, SnapshotChain, SnapshotSplit
from annotation.quality.review import AdjudicatedRating, adjudication_create
from prm_training.models import (
    EvaluationResult,
    EvaluationRun,
    EvaluationTrigger,
    ModelVersion,
    RunStatus,
    TrainingRun,
)
from prm_training.services.evaluation_runs import evaluation_run_execute
from prm_training.services.training import training_run_start
from tests.prm_training.ml_tiny import tiny_settings

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _finished(run_id: int, worker: Any, what: str) -> EvaluationRun:
    wait_until(
        lambda: EvaluationRun.objects.get(pk=run_id).is_finished,
        timeout=300,
        what=what,
        diagnose=worker.output,
    )
    run = EvaluationRun.objects.get(pk=run_id)
    assert run.status == RunStatus.SUCCEEDED, run.error
    return run


def test_a_version_is_scored_on_a_set_marked_later_and_again_when_its_chains_change(
    celery_workers: WorkerFactory, arithmetic_project: Any, make_member: Any, tiny_bert_dir: Any
) -> None:
    # Given v1, trained before the project had any evaluation set
    project = arithmetic_project
    worker = celery_workers.start()
    training = training_run_start(
        project=project, user=make_member(project, "ml"), settings=tiny_settings(tiny_bert_dir)
    )
    wait_until(
        lambda: TrainingRun.objects.get(pk=training.pk).is_finished,
        timeout=300,
        what="the training run",
        diagnose=worker.output,
    )
    version = ModelVersion.objects.get(training_run=training)
    assert not version.evaluation_results.exists()
    assert not EvaluationRun.objects.exists()  # no set: nothing to fill

    # When a lead holds out the chains v1 was measured on and four it trained on
    split = dict(
        SnapshotChain.objects.filter(snapshot=version.snapshot).values_list("chain_id", "split")
    )
    unseen = sorted(c for c, s in split.items() if s == SnapshotSplit.HELDOUT)
    trained_on = sorted(c for c, s in split.items() if s == SnapshotSplit.TRAIN)[:4]
    assert len(unseen) >= 3
    held = evaluation_set_mark_chains(
        project=project, chain_ids=unseen + trained_on, name="held out later"
    )

    # Then the worker measures v1 there, with its snapshot's labels, on the chains it did
    # not train on, without a training run
    [run] = EvaluationRun.objects.filter(project=project)
    assert run.trigger == EvaluationTrigger.SETS_CHANGED
    run = _finished(run.pk, worker, "the evaluation run after the set was marked")
    assert (run.filled, run.skipped, run.snapshot_id) == (1, [], version.snapshot_id)
    first = EvaluationResult.objects.get(model_version=version, evaluation_set=held)
    assert (first.chains, first.unlabeled_chains) == (len(unseen), 0)
    assert first.snapshot_id == version.snapshot_id
    assert "model" in first.report["scores"]
    assert TrainingRun.objects.count() == 1

    # When a lead rules on one of its chains (its labels change)
    ruled_chain = Chain.objects.get(pk=unseen[0])
    adjudication_create(
        chain=ruled_chain,
        lead=make_member(project, "lead"),
        ratings=[AdjudicatedRating(step_id=ruled_chain.steps.order_by("index")[0].pk, rating=-1)],
    )

    # Then a run freezes the labels as they are now and measures v1 there again with them
    [relabel] = EvaluationRun.objects.filter(trigger=EvaluationTrigger.LABELS_CHANGED)
    relabel = _finished(relabel.pk, worker, "the evaluation run after the ruling")
    assert relabel.filled == 1 and relabel.snapshot is not None
    assert relabel.snapshot.meta["evaluation_run"] == relabel.pk
    ruled = EvaluationResult.objects.get(model_version=version, evaluation_set=held)
    assert ruled.snapshot_id == relabel.snapshot_id and ruled.created_at > first.created_at

    # When the lead takes two of its chains out from the data manager
    chains_evaluation_set_remove(project=project, chain_ids=unseen[:2], evaluation_set=held)

    # Then the figures of the old chains are gone at once, and measured again on the rest
    assert not EvaluationResult.objects.filter(pk__in=[first.pk, ruled.pk]).exists()
    [again] = EvaluationRun.objects.filter(project=project).exclude(pk__in=[run.pk, relabel.pk])
    again = _finished(again.pk, worker, "the evaluation run after the chains changed")
    second = EvaluationResult.objects.get(model_version=version, evaluation_set=held)
    assert second.chains == len(unseen) - 2
    assert second.created_at > first.created_at
    assert set(Chain.objects.filter(evaluation_set=held).values_list("pk", flat=True)) == set(
        unseen[2:] + trained_on
    )

    # And a second delivery of a finished run does nothing
    assert evaluation_run_execute(run_id=again.pk, task_id="again", worker="w") is None
    assert EvaluationResult.objects.filter(model_version=version).count() == 1
