"""Webhooks delivered by a real Celery worker (Redis broker, a worker process against the
test database) to a real HTTP receiver on loopback: every event arrives, signed so that
``standardwebhooks`` verifies it; a dead receiver's delivery fails and backs off, and its
replay once the receiver is up arrives; a rolled-back change sends nothing; a row the
broker never took is sent by the worker when it connects."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.datasets.snapshots import snapshot_create
from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.models import (
    Role,
    Webhook,
    WebhookDelivery,
    WebhookDeliveryStatus,
    WebhookEvent,
)
from annotation.webhooks.events import message_id_new, webhook_payload
from annotation.webhooks.services import webhook_create, webhook_test_send
from prm_training.models import ModelVersion, RunStatus, ScoringRun, TrainingRun
from prm_training.services.model_versions import model_version_activate
from prm_training.services.runs import run_finish
from tests.annotation.labeling.claiming import assignment_claim_next
from tests.annotation.webhooks.receiver import Receiver
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory
from tests.prm_training.prm_worker import WorkerFactory, WorkerHandle, wait_until

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]

# The workers' retry delay (``conftest.hook_workers``).
RETRY_SECONDS = 3600


def _waiting_for(receiver: Receiver, worker: WorkerHandle, events: list[str]) -> None:
    def diagnose() -> str:
        rows = list(WebhookDelivery.objects.values("event", "status", "attempts", "last_error"))
        return (
            f"received {[json.loads(r.body)['type'] for r in receiver.received]}\n{rows}\n"
            + (worker.output()[-4000:])
        )

    wait_until(
        lambda: all(receiver.of_type(event) for event in events),
        timeout=90,
        what=f"the receiver to get {events}",
        diagnose=diagnose,
    )


def _finish_a_chain(project: Any) -> None:
    annotator = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    lease = assignment_claim_next(project=project, user=annotator)
    assert lease is not None
    steps = lease.chain.steps.order_by("index")
    assignment_submit(
        assignment_id=lease.pk,
        user=annotator,
        ratings=[RatingInput(step_id=s.pk, rating=1) for s in steps],
    )


def _upload(client: APIClient, project: Any, name: str, content: bytes) -> None:
    answer = client.post(
        f"/api/v1/projects/{project.pk}/imports/",
        {"file": SimpleUploadedFile(name, content)},
        format="multipart",
    )
    assert answer.status_code == 202, answer.content


def test_every_event_reaches_the_receiver_signed(
    hook_workers: WorkerFactory, receiver: Receiver
) -> None:
    # Given a project whose lead's webhook subscribes to every event, and a worker
    worker = hook_workers.start(name="hooks-worker@%h")
    project = ProjectFactory(overlap=1)
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    hook = webhook_create(
        project=project, user=lead, url=receiver.url, events=list(WebhookEvent.values)
    )
    client = APIClient()
    client.force_authenticate(user=lead)
    ChainFactory(project=project, step_count=3)

    # When each event happens, as each happens in the product
    _finish_a_chain(project)
    snapshot = snapshot_create(project=project)
    _upload(client, project, "good.jsonl", b'{"problem": "p", "steps": ["a", "b"]}\n')
    _upload(client, project, "bad.jsonl", b'{"problem": "q", "steps": []}\n')
    training = TrainingRun.objects.create(
        project=project, status=RunStatus.RUNNING, attempts=1, snapshot=snapshot
    )
    run_finish(training, status=RunStatus.FAILED, error="CUDA out of memory")
    version = ModelVersion.objects.create(
        project=project,
        training_run=TrainingRun.objects.create(project=project, status=RunStatus.SUCCEEDED),
        snapshot=snapshot,
        version=1,
        checkpoint_dir="/nonexistent",
        metrics={"step_auroc": 0.7},
    )
    model_version_activate(model_version=version, user=None)
    scoring = ScoringRun.objects.create(
        project=project,
        model_version=version,
        strategy="uncertainty",
        status=RunStatus.RUNNING,
        attempts=1,
    )
    run_finish(scoring, status=RunStatus.SUCCEEDED, priorities_updated=3)

    # Then the receiver gets one of each, and each verifies with the webhook's secret
    _waiting_for(receiver, worker, list(WebhookEvent.values))
    payloads = {
        event: receiver.of_type(event)[0].verified(hook.secret) for event in WebhookEvent.values
    }
    data = {event: payload["data"] for event, payload in payloads.items()}
    assert all(d["project"] == project.pk for d in data.values())
    assert data["snapshot.created"]["version"] == 1
    assert data["import.finished"]["chains_created"] == 1
    assert data["import.failed"]["error_count"] == 1
    assert data["training_run.finished"] == {
        "project": project.pk,
        "training_run": training.pk,
        "status": "failed",
        "trigger": "manual",
        "snapshot": snapshot.pk,
        "model_version": None,
        "version": None,
        "activated": False,
        "error": "CUDA out of memory",
    }
    assert data["model_version.activated"]["model_version"] == version.pk
    assert data["scoring_run.finished"]["priorities_updated"] == 3
    assert all(len(receiver.of_type(event)) == 1 for event in WebhookEvent.values)
    _waiting_for_nothing_pending(worker)
    assert set(WebhookDelivery.objects.values_list("status", flat=True)) == {"delivered"}
    assert "annotation.webhook_deliver" in worker.output()


def test_a_dead_receiver_backs_off_and_a_replay_arrives_once_it_is_up(
    hook_workers: WorkerFactory,
) -> None:
    # Given a webhook whose receiver is down (nothing listens on its port)
    worker = hook_workers.start(name="hooks-worker@%h")
    receiver = Receiver()
    receiver.reserve_port()
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    hook = webhook_create(
        project=project, user=lead, url=receiver.url, events=[WebhookEvent.CHAIN_FINISHED]
    )
    client = APIClient()
    client.force_authenticate(user=lead)
    base = f"/api/v1/projects/{project.pk}/webhooks/{hook.pk}/"

    # When a test event is sent
    sent = client.post(f"{base}test/", {})
    assert sent.status_code == 202

    # Then the worker's attempt fails and the delivery waits, backed off
    row = WebhookDelivery.objects.get(pk=sent.json()["id"])
    wait_until(
        lambda: (
            WebhookDelivery.objects.filter(pk=row.pk, attempts=1).exclude(last_error="").exists()
        ),
        timeout=60,
        what="the first attempt",
        diagnose=lambda: worker.output()[-4000:],
    )
    row.refresh_from_db()
    assert row.status == WebhookDeliveryStatus.PENDING
    assert "connect" in row.last_error.lower()
    assert (row.next_attempt_at - row.last_attempt_at).total_seconds() == RETRY_SECONDS
    log = client.get(f"{base}deliveries/").json()["results"]
    assert [(d["id"], d["status"], d["attempts"]) for d in log] == [(row.pk, "pending", 1)]

    # When the receiver is up and the lead replays the delivery
    receiver.start()
    try:
        replay = client.post(f"{base}deliveries/{row.pk}/replay/", {})
        assert replay.status_code == 202
        _waiting_for(receiver, worker, ["webhook.test"])
    finally:
        receiver.stop()

    # Then it arrives, signed, with the message's id, and the log says so
    (got,) = receiver.received
    assert got.verified(hook.secret)["data"] == {"project": project.pk, "webhook": hook.pk}
    assert got.headers["webhook-id"] == row.message_id
    wait_until(
        lambda: WebhookDelivery.objects.filter(pk=replay.json()["id"], status="delivered").exists(),
        timeout=30,
        what="the replay to be logged as delivered",
        diagnose=lambda: worker.output()[-4000:],
    )
    statuses = {d["id"]: d["status"] for d in client.get(f"{base}deliveries/").json()["results"]}
    assert statuses == {row.pk: "failed", replay.json()["id"]: "delivered"}


def test_a_rolled_back_change_sends_nothing(
    hook_workers: WorkerFactory, receiver: Receiver
) -> None:
    worker = hook_workers.start(name="hooks-worker@%h")
    project = ProjectFactory(overlap=1)
    hook = webhook_create(
        project=project, user=None, url=receiver.url, events=list(WebhookEvent.values)
    )
    ChainFactory(project=project, step_count=2)
    _finish_a_chain(project)
    receiver.received.clear()
    _waiting_for_nothing_pending(worker)
    receiver.received.clear()

    # When a snapshot is taken in a transaction that then fails
    with pytest.raises(RuntimeError), transaction.atomic():
        snapshot_create(project=project)
        raise RuntimeError("rolled back")
    # ... and then a test event commits (after it in the worker's queue)
    webhook_test_send(webhook=hook)

    # Then the test event arrives and the snapshot never does
    _waiting_for(receiver, worker, ["webhook.test"])
    assert receiver.of_type("snapshot.created") == []
    assert not WebhookDelivery.objects.filter(event="snapshot.created").exists()


def _waiting_for_nothing_pending(worker: WorkerHandle) -> None:
    wait_until(
        lambda: not WebhookDelivery.objects.filter(status="pending").exists(),
        timeout=60,
        what="every delivery to be sent",
        diagnose=lambda: worker.output()[-4000:],
    )


def test_a_row_the_broker_never_took_is_sent_by_a_workers_sweep(
    hook_workers: WorkerFactory, receiver: Receiver
) -> None:
    # Given a committed outbox row whose message never reached the broker
    project = ProjectFactory()
    hook = webhook_create(
        project=project, user=None, url=receiver.url, events=[WebhookEvent.SNAPSHOT_CREATED]
    )
    row = WebhookDelivery.objects.create(
        webhook=hook,
        event=WebhookEvent.SNAPSHOT_CREATED,
        message_id=message_id_new(),
        payload=webhook_payload(
            event=WebhookEvent.SNAPSHOT_CREATED, project_id=project.pk, data={"snapshot": 1}
        ),
        next_attempt_at=timezone.now(),
    )
    assert Webhook.objects.count() == 1

    # When a worker starts (it sweeps when it connects, and every SWEEP_SECONDS)
    worker = hook_workers.start(name="hooks-worker@%h")

    # Then it sends the row
    _waiting_for(receiver, worker, ["snapshot.created"])
    (got,) = receiver.received
    assert got.headers["webhook-id"] == row.message_id
    assert got.verified(hook.secret)["data"]["snapshot"] == 1
