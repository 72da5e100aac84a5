"""The PRM loop on a real Celery worker (Redis broker, PostgreSQL test database): train,
publish, score, reorder the queue; and a worker killed mid-run publishes nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prm_worker import WorkerFactory, wait_until

from annotation.models import Chain
from prm_training.models import ChainScore, ModelVersion, RunStatus, ScoringRun, TrainingRun
from prm_training.services.scoring import scoring_run_start
from prm_training.services.training import training_run_start

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# Small and fast on the CPU: frozen bundled MiniLM, a small head ensemble.
FAST = {
    "mode": "frozen_head",
    "head_epochs": 30,
    "ensemble_size": 3,
    "head_hidden": 32,
    "max_length": 128,
    "device": "cpu",
}


def _run_status(model: Any, pk: int) -> str:
    return model.objects.values_list("status", flat=True).get(pk=pk)


def _wait_until_ended(model: Any, run: Any, *, worker: Any, timeout: float, what: str) -> None:
    """Wait until the worker has ended ``run`` (succeeded or failed), showing the worker's
    output if it never does."""
    wait_until(
        lambda: _run_status(model, run.pk) in (RunStatus.SUCCEEDED, RunStatus.FAILED),
        timeout=timeout,
        what=what,
        diagnose=worker.output,
    )


def test_worker_trains_publishes_an_active_version_and_scoring_reorders_the_queue(
    celery_workers: WorkerFactory, arithmetic_project: Any, make_member: Any, model_dir: Path
) -> None:
    # Given a project with 30 labeled and 20 unlabeled chains, all at priority 0, and a worker
    project = arithmetic_project
    ml = make_member(project, "ml")
    worker = celery_workers.start()
    queue_before = list(
        Chain.objects.filter(project=project, is_finished=False)
        .order_by("-priority", "id")
        .values_list("id", flat=True)
    )

    # When ML staff start a training run
    run = training_run_start(project=project, user=ml, settings=FAST)

    # Then the worker trains it and publishes an active version from a fresh snapshot
    _wait_until_ended(TrainingRun, run, worker=worker, timeout=300, what="the training run")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.progress == 1.0
    assert run.attempts == 1
    assert run.snapshot is not None and run.snapshot.counts["chains"] == 30
    version = ModelVersion.objects.get(training_run=run)
    assert version.is_active
    assert version.version == 1
    assert Path(version.checkpoint_dir).is_dir()
    assert Path(version.checkpoint_dir).is_relative_to(model_dir)
    assert version.metrics["heldout_chains"] > 0
    assert 0.0 <= version.metrics.get("step_auroc", 0.5) <= 1.0
    assert "No active version" in run.activation_note

    # When they score the unlabeled chains by entropy, without the random share
    scoring = scoring_run_start(project=project, user=ml, strategy="entropy", random_fraction=0.0)
    _wait_until_ended(ScoringRun, scoring, worker=worker, timeout=180, what="the scoring run")

    # Then every unlabeled chain has scores, and the queue follows the acquisition order
    scoring.refresh_from_db()
    assert scoring.status == RunStatus.SUCCEEDED, scoring.error
    assert scoring.chains_scored == 20
    assert scoring.priorities_updated == 20
    scores = list(ChainScore.objects.filter(scoring_run=scoring))
    assert sorted(s.chain_id for s in scores) == project.unlabeled_ids
    assert all(len(s.step_probs) == 3 and len(s.member_probs) == 3 for s in scores)
    by_acquisition = [
        s.chain_id for s in sorted(scores, key=lambda s: (-s.acquisition, s.chain_id))
    ]
    queue_after = list(
        Chain.objects.filter(project=project, is_finished=False)
        .order_by("-priority", "id")
        .values_list("id", flat=True)
    )
    assert queue_after == by_acquisition
    assert queue_after != queue_before
    labeled_priorities = set(
        Chain.objects.filter(project=project, is_finished=True).values_list("priority", flat=True)
    )
    assert labeled_priorities == {0.0}


def test_worker_makes_a_zero_shot_version_that_orders_an_unlabeled_queue(
    celery_workers: WorkerFactory, project: Any, tmp_path: Path, monkeypatch: Any
) -> None:
    # Given a project with no label, an open PRM (the tiny Llama with its own step head)
    # under the backbone root, and a worker that sees it
    from annotation.models import Step
    from prm_training.ml.synthetic import synthetic_chains
    from tests.factories import ChainFactory, ProblemFactory
    from tests.prm_training.ml_tiny import tiny_step_prm_dir

    tiny_step_prm_dir(tmp_path / "open-prms")
    monkeypatch.setenv("STEPLAB_BACKBONE_DIR", str(tmp_path / "open-prms"))
    for example in synthetic_chains(8, seed=41, labeled=False):
        chain = ChainFactory(
            project=project, problem=ProblemFactory(project=project, text=example.problem)
        )
        Step.objects.filter(chain=chain).delete()
        Step.objects.bulk_create(
            [Step(chain=chain, index=k, text=text) for k, text in enumerate(example.steps)]
        )
    worker = celery_workers.start(env={"STEPLAB_BACKBONE_DIR": str(tmp_path / "open-prms")})
    settings = {"backbone": "llama-prm", "zero_shot": True, "step_prior": True, "max_length": 64}

    # When ML staff make a zero-shot version, then score with it
    run = training_run_start(project=project, user=None, settings={**settings, "device": "cpu"})
    _wait_until_ended(TrainingRun, run, worker=worker, timeout=300, what="the zero-shot run")
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    version = ModelVersion.objects.get(training_run=run)
    assert version.is_active and version.is_zero_shot and version.snapshot is None
    # with entropy set by hand ('auto' stays random until labels give evidence)
    scoring = scoring_run_start(project=project, user=None, strategy="entropy", random_fraction=0.0)
    _wait_until_ended(ScoringRun, scoring, worker=worker, timeout=180, what="the scoring run")

    # Then the queue of the unlabeled project follows the PRM's own step uncertainty
    scoring.refresh_from_db()
    assert scoring.status == RunStatus.SUCCEEDED, scoring.error
    assert scoring.applied_strategy == "entropy" and scoring.priorities_updated == 8
    assert Chain.objects.filter(project=project, priority__gt=0).count() == 8


def test_a_worker_killed_mid_run_publishes_nothing_and_the_next_worker_reaps_the_run(
    celery_workers: WorkerFactory,
    arithmetic_project: Any,
    make_member: Any,
    endless_runs_allowed: None,
) -> None:
    # Given an active version and a run slow enough to kill mid-training
    project = arithmetic_project
    ml = make_member(project, "ml")
    from prm_training.models import TrainingRun as Run

    earlier = Run.objects.create(project=project, status=RunStatus.SUCCEEDED, settings={})
    from annotation.datasets.snapshots import snapshot_create

    active = ModelVersion.objects.create(
        project=project,
        training_run=earlier,
        snapshot=snapshot_create(project=project),
        version=1,
        checkpoint_dir="/nonexistent/checkpoint",
        metrics={"processbench_f1": 0.5},
        is_active=True,
    )
    worker = celery_workers.start()
    run = training_run_start(project=project, user=ml, settings={**FAST, "head_epochs": 1_000_000})
    wait_until(
        lambda: Run.objects.filter(pk=run.pk, status=RunStatus.RUNNING, progress__gt=0).exists(),
        timeout=300,
        what="training to make progress",
        diagnose=worker.output,
    )

    # When the worker process is killed mid-run
    worker.kill()

    # Then the run is not succeeded, nothing is published, the active version stays
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert ModelVersion.objects.filter(project=project).count() == 1
    active.refresh_from_db()
    assert active.is_active

    # When a worker starts again under the same node name
    celery_workers.start()

    # Then it marks the orphaned run failed, and still nothing is published
    wait_until(
        lambda: _run_status(Run, run.pk) == RunStatus.FAILED,
        timeout=60,
        what="the orphaned run to be reaped",
        diagnose=worker.output,
    )
    run.refresh_from_db()
    assert "Worker lost" in run.error
    assert not ModelVersion.objects.filter(training_run=run).exists()
    assert list(ModelVersion.objects.filter(is_active=True).values_list("pk", flat=True)) == [
        active.pk
    ]

    # When the killed worker's unacknowledged message is delivered again (Redis does so
    # after the visibility timeout; here the task body runs as the redelivery would)
    from prm_training.services.training import training_run_execute

    assert training_run_execute(run_id=run.pk, task_id="redelivered", worker="other@b") is None

    # Then it finds the run finished and does nothing: still exactly one version, no
    # duplicate, and the run stays failed
    assert list(ModelVersion.objects.filter(project=project).values_list("pk", flat=True)) == [
        active.pk
    ]
    assert _run_status(Run, run.pk) == RunStatus.FAILED
