"""Webhooks without a worker: the outbox row an event writes (in its transaction, and not
when it rolls back), one attempt at it against a real HTTP receiver on loopback (signed
per Standard Webhooks, verified with the ``standardwebhooks`` package), the backoff after
a dead receiver or a 5xx, the end of the retries, and the URLs that are refused."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from annotation.datasets.snapshots import snapshot_create
from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.models import (
    Role,
    Webhook,
    WebhookDelivery,
    WebhookDeliveryStatus,
    WebhookEvent,
)
from annotation.public_ids import CHAIN_IDS
from annotation.quality.gold import gold_mark
from annotation.webhooks.delivery import webhook_deliveries_prune, webhook_delivery_attempt
from annotation.webhooks.services import (
    webhook_create,
    webhook_delivery_replay,
    webhook_test_send,
)
from tests.annotation.labeling.claiming import assignment_claim_next
from tests.annotation.webhooks.receiver import Receiver
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


def _labeled_project(overlap: int = 1) -> Any:
    project = ProjectFactory(overlap=overlap)
    chain = ChainFactory(project=project, step_count=3, finished_count=1, is_finished=True)
    annotation_with_ratings(
        chain=chain, annotator=MembershipFactory(project=project).user, labels=[1, 1, -1]
    )
    return project


def _hook(project: Any, url: str, events: list[str] | None = None) -> Webhook:
    return webhook_create(
        project=project, user=None, url=url, events=events or [WebhookEvent.SNAPSHOT_CREATED]
    )


def test_a_snapshot_sends_a_signed_message_the_receiver_verifies(receiver: Receiver) -> None:
    # Given a webhook on snapshots, and one on chains only
    project = _labeled_project()
    hook = _hook(project, receiver.url)
    _hook(project, receiver.url, [WebhookEvent.CHAIN_FINISHED])

    # When a snapshot is taken: one row, for the subscribed webhook, waiting
    snapshot = snapshot_create(project=project, finished_only=False)
    (row,) = WebhookDelivery.objects.all()
    assert (row.webhook_id, row.status, row.attempts) == (hook.pk, "pending", 0)

    # ... and a worker's attempt posts it
    delivered = webhook_delivery_attempt(delivery_id=row.pk)

    # Then the receiver got it, signed with the webhook's secret
    (got,) = receiver.received
    payload = got.verified(hook.secret)
    assert payload["type"] == "snapshot.created"
    assert payload["data"]["project"] == project.pk
    assert payload["data"]["snapshot"] == snapshot.pk
    assert payload["data"]["version"] == 1
    assert payload["data"]["content_hash"] == snapshot.content_hash
    assert got.headers["webhook-id"] == row.message_id
    assert delivered is not None and delivered.status == WebhookDeliveryStatus.DELIVERED
    assert (delivered.attempts, delivered.last_status_code) == (1, 204)
    assert delivered.response_ms is not None and delivered.delivered_at is not None
    # a wrong secret does not verify
    with pytest.raises(Exception, match="signature"):
        got.verified("whsec_" + "A" * 32)
    # a second copy of the task finds it done
    assert webhook_delivery_attempt(delivery_id=row.pk) is None
    assert len(receiver.received) == 1


def test_a_rolled_back_change_leaves_no_message() -> None:
    project = _labeled_project()
    _hook(project, "http://127.0.0.1:9/never")

    with pytest.raises(RuntimeError), transaction.atomic():
        snapshot_create(project=project, finished_only=False)
        raise RuntimeError("the caller's transaction fails after the snapshot")

    assert WebhookDelivery.objects.count() == 0


def test_a_paused_webhook_gets_nothing() -> None:
    project = _labeled_project()
    hook = _hook(project, "http://127.0.0.1:9/never")
    Webhook.objects.filter(pk=hook.pk).update(active=False)

    snapshot_create(project=project, finished_only=False)

    assert WebhookDelivery.objects.count() == 0


def test_a_dead_receiver_backs_off_then_the_delivery_fails(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STEPLAB_WEBHOOK_RETRY_SECONDS", "30,120")
    project = _labeled_project()
    _hook(project, receiver.url)
    receiver.stop()
    snapshot_create(project=project, finished_only=False)
    (row,) = WebhookDelivery.objects.all()

    # The first attempt cannot connect: pending again, 30 s later
    first = webhook_delivery_attempt(delivery_id=row.pk)
    assert first is not None
    assert (first.status, first.attempts, first.last_status_code) == ("pending", 1, None)
    assert "connect" in first.last_error.lower()
    assert first.next_attempt_at - first.last_attempt_at == timedelta(seconds=30)
    # not due yet: a second copy of the task does nothing
    assert webhook_delivery_attempt(delivery_id=row.pk) is None

    # The second, once due, waits 120 s more; the third is the last
    WebhookDelivery.objects.filter(pk=row.pk).update(next_attempt_at=timezone.now())
    second = webhook_delivery_attempt(delivery_id=row.pk)
    assert second is not None and second.attempts == 2
    assert second.next_attempt_at - second.last_attempt_at == timedelta(seconds=120)
    WebhookDelivery.objects.filter(pk=row.pk).update(next_attempt_at=timezone.now())
    third = webhook_delivery_attempt(delivery_id=row.pk)
    assert third is not None
    assert (third.status, third.attempts, third.next_attempt_at) == ("failed", 3, None)

    # A replay once the receiver is back sends the same message, and it arrives
    receiver.start()
    replay = webhook_delivery_replay(delivery=third)
    done = webhook_delivery_attempt(delivery_id=replay.pk)
    assert done is not None and done.status == "delivered"
    (got,) = receiver.received
    assert got.headers["webhook-id"] == row.message_id
    assert got.verified(row.webhook.secret)["type"] == "snapshot.created"


def test_a_5xx_answer_is_retried_with_its_code_logged(receiver: Receiver) -> None:
    receiver.status = 503
    project = _labeled_project()
    _hook(project, receiver.url)
    snapshot_create(project=project, finished_only=False)

    attempt = webhook_delivery_attempt(delivery_id=WebhookDelivery.objects.get().pk)

    assert attempt is not None
    assert (attempt.status, attempt.last_status_code) == ("pending", 503)
    assert attempt.last_error == "The receiver answered 503."
    assert len(receiver.received) == 1


def test_replaying_a_waiting_delivery_closes_it(receiver: Receiver) -> None:
    receiver.status = 500
    project = _labeled_project()
    _hook(project, receiver.url)
    snapshot_create(project=project, finished_only=False)
    row = WebhookDelivery.objects.get()
    webhook_delivery_attempt(delivery_id=row.pk)

    replay = webhook_delivery_replay(delivery=row)

    row.refresh_from_db()
    assert (row.status, row.next_attempt_at) == ("failed", None)
    assert f"Replayed as delivery {replay.pk}" in row.last_error
    assert (replay.status, replay.replay_of_id, replay.message_id) == (
        "pending",
        row.pk,
        row.message_id,
    )


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/x",
        "http://localhost/x",
        "http://10.1.2.3/x",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/x",
        "http://192.168.0.10/x",
    ],
)
def test_private_addresses_are_refused_unless_allowed(settings: Any, url: str) -> None:
    settings.STEPLAB_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(ValidationError, match="private"):
        _hook(ProjectFactory(), url)


@pytest.mark.parametrize(
    ("url", "reason"),
    [("ftp://example.org/x", "http"), ("http://user:pw@example.org/x", "password")],
)
def test_other_schemes_and_credentials_are_refused(url: str, reason: str) -> None:
    with pytest.raises(ValidationError, match=reason):
        _hook(ProjectFactory(), url)


def test_an_address_made_private_after_saving_is_not_called(
    receiver: Receiver, settings: Any
) -> None:
    project = _labeled_project()
    _hook(project, receiver.url)
    snapshot_create(project=project, finished_only=False)
    settings.STEPLAB_WEBHOOK_ALLOW_PRIVATE = False

    attempt = webhook_delivery_attempt(delivery_id=WebhookDelivery.objects.get().pk)

    assert attempt is not None and "private" in attempt.last_error
    assert receiver.received == []


def test_a_finished_chain_is_named_by_its_public_id_and_a_gold_pass_sends_nothing() -> None:
    # Given overlap 1, a webhook on finished chains, a real chain and a gold one
    project = ProjectFactory(overlap=1, gold_rate=1.0)
    annotator = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    _hook(project, "http://127.0.0.1:9/never", [WebhookEvent.CHAIN_FINISHED])
    gold = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=gold, labels=[1, 1])
    gold_mark(project=project, chain_ids=[gold.pk])
    real = ChainFactory(project=project, step_count=2)

    # When the annotator grades both
    seen = []
    for _ in range(2):
        lease = assignment_claim_next(project=project, user=annotator)
        assert lease is not None
        seen.append(lease.chain_id)
        steps = lease.chain.steps.order_by("index")
        assignment_submit(
            assignment_id=lease.pk,
            user=annotator,
            ratings=[RatingInput(step_id=s.pk, rating=1) for s in steps],
        )
    assert sorted(seen) == sorted([gold.pk, real.pk])

    # Then only the real chain finished, named by the lab's public id (no annotator's)
    (row,) = WebhookDelivery.objects.all()
    assert row.payload["type"] == "chain.finished"
    assert row.payload["data"] == {
        "project": project.pk,
        "chain": CHAIN_IDS.show(real.pk, viewer=None),
        "passes": 1,
    }


def test_an_attempt_goes_to_the_address_checked_with_the_name_as_host(
    receiver: Receiver,
) -> None:
    # Given a webhook that names its receiver by name, not by address
    project = _labeled_project()
    hook = _hook(project, f"http://localhost:{receiver.port}/hooks/steplab?via=name")
    snapshot_create(project=project, finished_only=False)

    attempt = webhook_delivery_attempt(delivery_id=WebhookDelivery.objects.get().pk)

    # Then it reached the address the name was checked at, named as the URL names it
    assert attempt is not None and attempt.status == "delivered", attempt.last_error
    (got,) = receiver.received
    headers = {name.lower(): value for name, value in got.headers.items()}
    assert headers["host"] == f"localhost:{receiver.port}"
    assert got.path == "/hooks/steplab?via=name"
    assert got.verified(hook.secret)["type"] == "snapshot.created"


def test_a_pinned_target_keeps_the_name_for_tls(settings: Any) -> None:
    from annotation.webhooks.targets import webhook_target

    target = webhook_target("https://[::1]:8443/a/b?c=d")
    assert (target.url, target.host, target.server_name) == (
        "https://[::1]:8443/a/b?c=d",
        "[::1]:8443",
        "::1",
    )
    settings.STEPLAB_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(Exception, match="private"):
        webhook_target("https://localhost/x")


def test_the_log_keeps_what_waits_and_what_is_recent(settings: Any) -> None:
    # Given deliveries of every state, some older than the log keeps
    settings.STEPLAB_WEBHOOK_LOG_DAYS = 30
    hook = _hook(ProjectFactory(), "http://127.0.0.1:9/never")
    now = timezone.now()
    rows = {}
    for name, status, days in [
        ("old delivered", "delivered", 31),
        ("old failed", "failed", 40),
        ("old pending", "pending", 45),
        ("recent delivered", "delivered", 29),
    ]:
        row = webhook_test_send(webhook=hook)
        WebhookDelivery.objects.filter(pk=row.pk).update(
            status=status,
            created_at=now - timedelta(days=days),
            next_attempt_at=now if status == "pending" else None,
        )
        rows[name] = row.pk

    assert webhook_deliveries_prune(batch=1) == 2

    kept = set(WebhookDelivery.objects.values_list("pk", flat=True))
    assert kept == {rows["old pending"], rows["recent delivered"]}
