"""Redis stopped (issue #6's fault scenario), against a private redis-server: labeling goes
on, and a training request made during the outage waits in its row (the outbox) and runs
once Redis is back, sent by the worker when it reconnects."""

from __future__ import annotations

from typing import Any

import pytest
from prm_worker import PrivateRedis, WorkerFactory, wait_until

from annotation.models import Annotation, Chain
from annotation.public_ids import CHAIN_IDS
from prm_training.models import ModelVersion, RunStatus, TrainingRun
from prm_training.services.training import training_run_start
from prm_training.services.training_settings import project_training_settings_update
from tests.prm_training.ml_tiny import tiny_settings

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _status(pk: int) -> str:
    return TrainingRun.objects.values_list("status", flat=True).get(pk=pk)


def test_labeling_goes_on_while_redis_is_down_and_training_waits_for_it(
    private_broker: PrivateRedis,
    celery_workers: WorkerFactory,
    arithmetic_project: Any,
    make_member: Any,
    client_for: Any,
    tiny_bert_dir: Any,
) -> None:
    # Given a worker on the private broker, and auto-retraining due at the next finished
    # chain (30 chains finished, none trained on yet)
    project = arithmetic_project
    project_training_settings_update(
        project=project,
        data={"retrain_every_n_finished": 31, "default_config": tiny_settings(tiny_bert_dir)},
    )
    worker = celery_workers.start(env={"CELERY_BROKER_URL": private_broker.url})
    ml = make_member(project, "ml")
    member = make_member(project, "annotator")
    annotator = client_for(member)

    # When Redis stops
    private_broker.stop()
    assert not private_broker.reachable()

    # Then an annotator still gets a chain and submits it, the submit that makes auto-
    # retraining due included: its check cannot be sent, and that fails nothing
    leased = annotator.post(f"/api/v1/projects/{project.pk}/assignments/next/")
    assert leased.status_code == 200, leased.content
    body = leased.json()
    ratings = [{"step": step["id"], "rating": 1} for step in body["chain"]["steps"]]
    submitted = annotator.post(
        f"/api/v1/assignments/{body['assignment']['id']}/submit/",
        {"ratings": ratings},
        format="json",
    )
    assert submitted.status_code == 201, submitted.content
    chain_id = CHAIN_IDS.read(body["chain"]["id"], viewer=member.pk)
    assert Annotation.objects.filter(chain_id=chain_id).exists()
    assert Chain.objects.filter(project=project, is_finished=True).count() == 31

    # ...and ML staff's training request is accepted and waits in its row, not sent
    run = training_run_start(project=project, user=ml, settings=tiny_settings(tiny_bert_dir))
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED
    assert run.enqueued_at is None

    # When Redis is back (same port, empty: nothing was persisted)
    private_broker.start()

    # Then the worker reconnects, sends the waiting run itself, and trains it
    wait_until(
        lambda: _status(run.pk) in (RunStatus.SUCCEEDED, RunStatus.FAILED),
        timeout=240,
        what="the run requested during the outage",
        diagnose=worker.output,
    )
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.enqueued_at is not None
    assert run.attempts == 1
    assert ModelVersion.objects.filter(training_run=run, is_active=True).exists()
    assert "Dispatched runs that waited for the broker" in worker.output()
    # The auto-retrain check lost with the outage ran again on reconnect; the manual run
    # was queued then, so it started none (one run at a time, counted from the last one)
    assert list(TrainingRun.objects.values_list("pk", flat=True)) == [run.pk]
