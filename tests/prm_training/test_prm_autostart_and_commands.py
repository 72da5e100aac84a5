"""On a real Celery worker (Redis, the PostgreSQL test database): auto-retraining starts
by itself after every N new finished chains, from the submit path; and the ``train_prm``
and ``score_chains`` commands run end to end on a tiny model."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from prm_worker import WorkerFactory, wait_until

from annotation.models import Chain
from annotation.public_ids import CHAIN_IDS
from prm_training.models import (
    ChainScore,
    ModelVersion,
    RunStatus,
    RunTrigger,
    ScoringRun,
    TrainingRun,
)
from prm_training.services.training_settings import project_training_settings_update
from tests.prm_training.ml_tiny import tiny_settings

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHECK_DONE = re.compile(r"Task prm_training\.autostart_check\[[^\]]+\] succeeded")


def _submit_next(client: Any, project: Any, *, viewer: int) -> int:
    """Lease the next chain and rate every step correct; returns the chain's row id
    (``viewer``: the user id of the annotator whose client it is)."""
    leased = client.post(f"/api/v1/projects/{project.pk}/assignments/next/")
    assert leased.status_code == 200, leased.content
    body = leased.json()
    ratings = [{"step": step["id"], "rating": 1} for step in body["chain"]["steps"]]
    submitted = client.post(
        f"/api/v1/assignments/{body['assignment']['id']}/submit/",
        {"ratings": ratings},
        format="json",
    )
    assert submitted.status_code == 201, submitted.content
    chain_id = CHAIN_IDS.read(body["chain"]["id"], viewer=viewer)
    assert chain_id is not None
    return chain_id


def test_auto_retraining_starts_after_every_n_new_finished_chains(
    celery_workers: WorkerFactory,
    arithmetic_project: Any,
    make_member: Any,
    client_for: Any,
    tiny_bert_dir: Path,
) -> None:
    # Given 30 finished chains, a run that already counted them, and auto-retraining after
    # every 2 new finished chains with the project's default config
    project = arithmetic_project
    TrainingRun.objects.create(
        project=project, status=RunStatus.FAILED, finished_chains_at_start=30
    )
    config = tiny_settings(tiny_bert_dir)
    project_training_settings_update(
        project=project, data={"retrain_every_n_finished": 2, "default_config": config}
    )
    worker = celery_workers.start()
    member = make_member(project, "annotator")
    annotator = client_for(member)

    # When one more chain is finished through the submit endpoint
    _submit_next(annotator, project, viewer=member.pk)
    wait_until(
        lambda: len(CHECK_DONE.findall(worker.output())) == 1,
        timeout=60,
        what="the first auto-retrain check",
        diagnose=worker.output,
    )

    # Then the worker's check starts nothing: 1 new chain is below N
    assert TrainingRun.objects.filter(trigger=RunTrigger.AUTO).count() == 0

    # When a second one is finished
    _submit_next(annotator, project, viewer=member.pk)

    # Then a run starts by itself with the default config, trains and publishes
    wait_until(
        lambda: TrainingRun.objects.filter(
            trigger=RunTrigger.AUTO, status__in=[RunStatus.SUCCEEDED, RunStatus.FAILED]
        ).exists(),
        timeout=240,
        what="the automatic run",
        diagnose=worker.output,
    )
    run = TrainingRun.objects.get(trigger=RunTrigger.AUTO)
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.started_by is None
    assert run.settings == config
    assert run.finished_chains_at_start == 32
    assert run.snapshot is not None and run.snapshot.counts["chains"] == 32
    assert ModelVersion.objects.filter(training_run=run, is_active=True).exists()
    assert len(CHECK_DONE.findall(worker.output())) == 2


def test_train_prm_and_score_chains_commands_run_on_the_worker(
    celery_workers: WorkerFactory, arithmetic_project: Any, tiny_bert_dir: Path
) -> None:
    # Given a project with 30 labeled and 20 unlabeled chains, and a worker
    project = arithmetic_project
    celery_workers.start()

    # When ML staff train from the command line and wait
    out = io.StringIO()
    call_command(
        "train_prm",
        str(project.pk),
        "--wait",
        "--timeout",
        "240",
        "--backbone",
        tiny_bert_dir.name,
        "--mode",
        "frozen_head",
        "--head-epochs",
        "3",
        "--max-length",
        "64",
        "--ensemble-size",
        "2",
        stdout=out,
    )

    # Then one line says the run succeeded and published the active v1
    run = TrainingRun.objects.get()
    assert run.status == RunStatus.SUCCEEDED
    assert run.settings["backbone"] == tiny_bert_dir.name
    summary = out.getvalue().strip()
    assert summary.startswith(f"training run {run.pk} succeeded:")
    assert "v1 (active;" in summary
    assert ModelVersion.objects.get(training_run=run).is_active

    # When they score the unlabeled chains by entropy, all by acquisition
    out = io.StringIO()
    call_command(
        "score_chains",
        project.name,
        "--wait",
        "--timeout",
        "240",
        "--strategy",
        "entropy",
        "--random-fraction",
        "0",
        stdout=out,
    )

    # Then every unlabeled chain is scored and the queue follows the acquisition order
    scoring = ScoringRun.objects.get()
    assert scoring.status == RunStatus.SUCCEEDED
    assert out.getvalue().strip() == (
        f'scoring run {scoring.pk} succeeded: 20 chains of "{project.name}" scored, '
        "20 priorities set by entropy"
    )
    scores = ChainScore.objects.filter(scoring_run=scoring)
    assert sorted(scores.values_list("chain_id", flat=True)) == project.unlabeled_ids
    # each row carries the chain's score (its weakest step) and uncertainty for the data
    # manager's filters
    for row in scores:
        assert row.chain_score == min(row.step_probs)
        assert row.chain_uncertainty == pytest.approx(
            max(1 - abs(2 * p - 1) for p in row.step_probs)
        )
    by_acquisition = [
        s.chain_id for s in sorted(scores, key=lambda s: (-s.acquisition, s.chain_id))
    ]
    queue = list(
        Chain.objects.filter(project=project, is_finished=False)
        .order_by("-priority", "id")
        .values_list("id", flat=True)
    )
    assert queue == by_acquisition
