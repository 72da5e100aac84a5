"""The gpu worker as a lab runs it (``config.workers``: prefork pool, a fresh daemonic child
per task) runs the tasks that start processes of their own: the math-verify grader of
answers that only it can decide, and data-parallel training ranks.

Before the workers were defined once, the tests ran the solo pool while every lab ran
prefork, where ``multiprocessing`` refuses children of a daemonic process: each of these
runs failed there with "daemonic processes are not allowed to have children"."""

from __future__ import annotations

from typing import Any

import pytest
from prm_worker import WorkerFactory, wait_until

from annotation.datasets.evaluation_sets import evaluation_set_mark_chains
from annotation.models import Problem, SnapshotChain, SnapshotSplit
from prm_training.models import EvaluationResult, EvaluationRun, ModelVersion, TrainingRun
from prm_training.services.training import training_run_start
from tests.prm_training.ml_tiny import tiny_settings

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _ended(model: Any, pk: int, worker: Any, what: str) -> Any:
    wait_until(
        lambda: model.objects.get(pk=pk).is_finished,
        timeout=300,
        what=what,
        diagnose=lambda: worker.output()[-6000:],
    )
    run = model.objects.get(pk=pk)
    assert run.status == "succeeded", (run.error, worker.output()[-4000:])
    return run


def _references_only_math_verify_decides(project: Any) -> None:
    """Every reference answer spelled as a fraction (2n/2 for the answer n): the grader's
    fast path cannot tell "7" from "\\frac{14}{2}", so each grade goes to its child."""
    for problem in Problem.objects.filter(project=project):
        value = int(problem.reference_answer)
        problem.reference_answer = f"\\frac{{{2 * value}}}{{2}}"
        problem.save(update_fields=["reference_answer"])


def test_the_production_gpu_worker_grades_answers_and_trains_on_two_processes(
    celery_workers: WorkerFactory,
    arithmetic_project: Any,
    make_member: Any,
    tiny_bert_dir: Any,
    settings: Any,
) -> None:
    # Given chains whose answers only math-verify grades, and the production workers
    project = arithmetic_project
    _references_only_math_verify_decides(project)
    ml = make_member(project, "ml")
    worker = celery_workers.start()

    # When ML staff train (the answer grade is one of the PRM's inputs)
    first = training_run_start(project=project, user=ml, settings=tiny_settings(tiny_bert_dir))

    # Then the run grades every final answer in the worker's child and publishes v1
    _ended(TrainingRun, first.pk, worker, "the training run")
    version = ModelVersion.objects.get(training_run=first)

    # When ML staff train again on two data-parallel processes (gloo on the CPU)
    limits = dict(settings.STEPLAB_TRAINING_LIMITS)
    limits["processes"] = (2, limits["processes"][1])
    settings.STEPLAB_TRAINING_LIMITS = limits
    second = training_run_start(
        project=project,
        user=ml,
        settings=tiny_settings(tiny_bert_dir, mode="full", processes=2, epochs=1),
    )

    # Then both ranks run as the worker's subprocesses and v2 is published
    _ended(TrainingRun, second.pk, worker, "the two-process training run")
    assert ModelVersion.objects.filter(training_run=second).exists()

    # When a lead holds out chains v1 was measured on as an evaluation set
    split = dict(
        SnapshotChain.objects.filter(snapshot=version.snapshot).values_list("chain_id", "split")
    )
    held = sorted(c for c, s in split.items() if s == SnapshotSplit.HELDOUT)
    evaluation_set = evaluation_set_mark_chains(project=project, chain_ids=held, name="held")

    # Then the evaluation run (which grades the chains' answers again) measures v1 there
    [evaluation] = EvaluationRun.objects.filter(project=project)
    _ended(EvaluationRun, evaluation.pk, worker, "the evaluation run")
    assert EvaluationResult.objects.filter(
        model_version=version, evaluation_set=evaluation_set
    ).exists()
    assert "daemonic processes" not in worker.output()
