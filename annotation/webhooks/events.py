"""Recording an event: one outbox row per webhook of the project that subscribes to it,
written in the caller's transaction, and the rows sent to a worker once it commits.

So a change that is rolled back sends nothing, and one that commits is never lost: if
the broker cannot take the message, the row stays PENDING and a worker's sweep sends it
(``delivery.webhook_deliveries_dispatch_due``).

A payload is small: ``type``, ``timestamp`` (when it happened, ISO 8601 UTC) and ``data``
with the project's id and the object's ids and a few fields a pipeline acts on. Chains are
named by their public ids (``annotation.public_ids``) in the lab's own permutation
(``viewer=None``), which say nothing of when a chain was imported and match no
annotator's ids, so a payload shown where annotators look cannot tell gold chains apart by
id; a pass over a gold chain never finishes it, so it sends no ``chain.finished``. The
training app calls ``webhook_event_record`` for its own events (it may import this app;
this app never imports it)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from annotation.models import (
    Chain,
    ImportJob,
    ImportJobStatus,
    Snapshot,
    Webhook,
    WebhookDelivery,
    WebhookEvent,
)
from annotation.public_ids import CHAIN_IDS
from annotation.webhooks.delivery import webhook_delivery_enqueue


def message_id_new() -> str:
    """A ``webhook-id``: unique per message, kept by its retries and replays."""
    return f"msg_{uuid.uuid4().hex}"


def webhook_payload(
    *, event: str, project_id: int, data: Mapping[str, Any], at: datetime | None = None
) -> dict[str, Any]:
    """The body of every message: the Standard Webhooks shape (type, timestamp, data)."""
    moment = (at or timezone.now()).astimezone(UTC)
    return {
        "type": event,
        "timestamp": moment.isoformat().replace("+00:00", "Z"),
        "data": {"project": project_id, **data},
    }


def webhook_event_record(*, project_id: int, event: str, data: Mapping[str, Any]) -> list[int]:
    """Write an outbox row for each active webhook of ``project_id`` subscribed to
    ``event`` and send each to a worker once the transaction commits. Returns the rows'
    ids. One query when the project has no webhook.

    Precondition: called inside the transaction that makes the change it reports (a
    caller outside any transaction gets its row at once, as its change was)."""
    hooks = [
        hook
        for hook in Webhook.objects.filter(project_id=project_id, active=True).only("events")
        if event in hook.events
    ]
    if not hooks:
        return []
    payload = webhook_payload(event=event, project_id=project_id, data=data)
    now = timezone.now()
    rows = WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            webhook_id=hook.pk,
            event=event,
            message_id=message_id_new(),
            payload=payload,
            next_attempt_at=now,
        )
        for hook in hooks
    )
    ids = [row.pk for row in rows]
    transaction.on_commit(lambda: [webhook_delivery_enqueue(delivery_id=pk) for pk in ids])
    return ids


# --- this app's events --------------------------------------------------------------------


def webhook_chain_finished(*, chain: Chain) -> None:
    """``chain.finished``: a human pass made the chain reach its overlap. (On PostgreSQL
    the submit writes these rows in its own statement: ``chain_finished_payload``.)"""
    webhook_event_record(
        project_id=chain.project_id,
        event=WebhookEvent.CHAIN_FINISHED,
        data=_chain_finished_data(chain=chain, passes=chain.finished_count),
    )


def _chain_finished_data(*, chain: Chain, passes: int) -> dict[str, Any]:
    return {"chain": CHAIN_IDS.show(chain.pk, viewer=None), "passes": passes}


def chain_finished_payload(*, chain: Chain, passes: int, at: datetime) -> str:
    """The ``chain.finished`` body for ``chain`` after ``passes`` passes, as JSON text: the
    submit's statement writes it into each subscribed webhook's outbox row
    (``labeling.queue.sql.CHAIN_FINISHED_HOOKS_SQL``) when the chain did finish. A gold
    pass shaped as the finishing one builds it too and writes none: what it costs and
    sends must be what the real one does."""
    payload = webhook_payload(
        event=WebhookEvent.CHAIN_FINISHED,
        project_id=chain.project_id,
        data=_chain_finished_data(chain=chain, passes=passes),
        at=at,
    )
    return json.dumps(payload)


# The id a message for no outbox row carries: the worker finds no such row and drops it.
NO_DELIVERY = 0


def webhook_deliveries_send_on_commit(*, ids: list[int], messages: int) -> None:
    """Send each outbox row of ``ids`` to a worker once the transaction commits, and as
    many messages for no row (``NO_DELIVERY``) as make ``messages`` in all: a gold pass
    shaped as the one that finishes its chain sends what the real one would, so its time
    says nothing of gold (``labeling.queue.submit``)."""
    sent = [*ids, *[NO_DELIVERY] * (messages - len(ids))]
    if sent:
        transaction.on_commit(lambda: [webhook_delivery_enqueue(delivery_id=pk) for pk in sent])


def webhook_snapshot_created(*, snapshot: Snapshot) -> None:
    counts = snapshot.counts or {}
    webhook_event_record(
        project_id=snapshot.project_id,
        event=WebhookEvent.SNAPSHOT_CREATED,
        data={
            "snapshot": snapshot.pk,
            "kind": snapshot.kind,
            "version": snapshot.version,
            "content_hash": snapshot.content_hash,
            "chains": counts.get("chains", 0),
            "train_chains": counts.get("train_chains", 0),
            "heldout_chains": counts.get("heldout_chains", 0),
            "steps_labeled": counts.get("steps_labeled", 0),
        },
    )


def webhook_import_ended(*, job: ImportJob) -> None:
    """``import.finished`` or ``import.failed`` for an upload's job that just ended."""
    data: dict[str, Any] = {"import_job": job.pk, "filename": job.filename}
    result = job.result or {}
    if job.status == ImportJobStatus.DONE:
        event = WebhookEvent.IMPORT_FINISHED
        data.update(
            {
                key: result[key]
                for key in (
                    "format",
                    "chains_created",
                    "chains_duplicate",
                    "steps_created",
                    "labels_created",
                )
                if key in result
            }
        )
    else:
        event = WebhookEvent.IMPORT_FAILED
        data.update({"detail": job.detail, "error_count": job.error_count})
    webhook_event_record(project_id=job.project_id, event=event, data=data)
