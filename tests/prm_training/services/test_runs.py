"""The lifecycle training and scoring runs share (``prm_training/services/runs.py``):
the outbox, the claim, the attempt that owns a run, the reaper."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from prm_training.models import RunStatus, ScoringRun, TrainingRun
from prm_training.services.runs import (
    MAX_ATTEMPTS,
    run_claim,
    run_finish,
    run_heartbeat,
    run_may_go_on,
    runs_dispatch_pending,
    runs_reap_stale,
    training_attempt_dir,
)
from tests.factories import scoring_run_with_model_version

pytestmark = pytest.mark.django_db


def _scoring_run(project: Any, **fields: Any) -> ScoringRun:
    return scoring_run_with_model_version(project=project, content_hash="x", **fields)


def test_a_claim_records_the_worker_and_a_second_delivery_finds_nothing_to_do(
    project: Any,
) -> None:
    # Given a queued scoring run (scoring runs once never recorded their worker)
    queued = _scoring_run(project)

    # When a worker claims it, and the same message is delivered again
    run = run_claim(ScoringRun, queued.pk, task_id="t1", worker="gpu@a")
    again = run_claim(ScoringRun, queued.pk, task_id="t2", worker="gpu@b")

    # Then the first attempt owns it under its worker's name and the second does nothing
    assert run is not None and again is None
    queued.refresh_from_db()
    assert (queued.status, queued.worker, queued.attempts) == (RunStatus.RUNNING, "gpu@a", 1)
    assert run_may_go_on(run)


def test_a_stale_run_is_taken_over_once_then_given_up(
    project: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a training run whose worker stopped beating, with a partial checkpoint on disk
    monkeypatch.setenv("STEPLAB_MODEL_DIR", str(tmp_path))
    stale = timezone.now() - timedelta(hours=2)
    queued = TrainingRun.objects.create(project=project)
    first = run_claim(TrainingRun, queued.pk, task_id="t1", worker="gpu@a")
    assert first is not None
    TrainingRun.objects.filter(pk=queued.pk).update(heartbeat_at=stale)
    leftovers = training_attempt_dir(first)
    assert leftovers.is_relative_to(tmp_path)
    leftovers.mkdir(parents=True)

    # When a redelivery claims it
    second = run_claim(
        TrainingRun, queued.pk, task_id="t2", worker="gpu@b", reset={"progress": 0.0}
    )

    # Then it takes the run over as a new attempt, the dead attempt's files removed, and the
    # old attempt no longer owns the run nor can finish it
    assert second is not None and second.attempts == 2
    assert not leftovers.exists()
    assert not run_may_go_on(first)
    assert not run_finish(first, status=RunStatus.FAILED, error="late")
    run_heartbeat(first, progress=0.9)
    assert TrainingRun.objects.get(pk=queued.pk).progress == 0.0

    # And once that attempt goes silent too, the run fails instead of a third attempt
    TrainingRun.objects.filter(pk=queued.pk).update(heartbeat_at=stale)
    assert MAX_ATTEMPTS == 2
    assert run_claim(TrainingRun, queued.pk, task_id="t3", worker="gpu@c") is None
    failed = TrainingRun.objects.get(pk=queued.pk)
    assert failed.status == RunStatus.FAILED
    assert "giving up" in failed.error


def test_a_run_cancelled_while_queued_is_not_claimed(project: Any) -> None:
    queued = TrainingRun.objects.create(project=project, cancel_requested=True)
    assert run_claim(TrainingRun, queued.pk, task_id="t", worker="w") is None
    assert TrainingRun.objects.get(pk=queued.pk).status == RunStatus.CANCELLED


def test_reaping_fails_runs_of_a_restarted_worker_and_silent_ones_only(project: Any) -> None:
    # Given training and scoring runs: one under the restarting worker's name, one silent,
    # one alive
    now = timezone.now()
    old = now - timedelta(hours=2)
    mine = TrainingRun.objects.create(
        project=project, status=RunStatus.RUNNING, worker="w@a", heartbeat_at=now, attempts=1
    )
    silent = TrainingRun.objects.create(
        project=project, status=RunStatus.RUNNING, worker="w@b", heartbeat_at=old, attempts=1
    )
    alive = TrainingRun.objects.create(
        project=project, status=RunStatus.RUNNING, worker="w@b", heartbeat_at=now, attempts=1
    )
    scoring_silent = _scoring_run(
        project, status=RunStatus.RUNNING, worker="w@c", heartbeat_at=old, attempts=1
    )

    # When worker w@a starts and reaps
    reaped = runs_reap_stale(worker="w@a", now=now)

    # Then its own and the silent runs failed, scoring included; the live one runs on
    assert reaped == 3
    statuses = dict(TrainingRun.objects.values_list("pk", "status"))
    assert statuses[mine.pk] == statuses[silent.pk] == RunStatus.FAILED
    assert statuses[alive.pk] == RunStatus.RUNNING
    scoring_silent.refresh_from_db()
    assert scoring_silent.status == RunStatus.FAILED
    assert "Worker lost: w@c" in scoring_silent.error


def test_dispatch_sends_only_the_queued_runs_the_broker_never_took(project: Any) -> None:
    # Given runs waiting for the broker, one it took, and one cancelled while waiting
    waiting = TrainingRun.objects.create(project=project)
    taken_at = timezone.now()
    taken = TrainingRun.objects.create(project=project, enqueued_at=taken_at)
    cancelled = TrainingRun.objects.create(project=project, cancel_requested=True)
    scoring = _scoring_run(project)

    # When a worker connects to the (reachable) broker and dispatches
    sent = runs_dispatch_pending()

    # Then only the waiting runs were sent and stamped
    assert sent == {
        "training": 1,
        "scoring": 1,
        "simulation": 0,
        "machine_labels": 0,
        "evaluation": 0,
    }
    waiting.refresh_from_db()
    taken.refresh_from_db()
    cancelled.refresh_from_db()
    scoring.refresh_from_db()
    assert waiting.enqueued_at is not None
    assert scoring.enqueued_at is not None
    assert taken.enqueued_at == taken_at
    assert cancelled.enqueued_at is None
