"""A lead's writes on the project's webhooks: create, change, delete, rotate the secret,
send a test event, replay a delivery. Each is one transaction; a message it makes is
sent once it commits."""

from __future__ import annotations

import base64
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from annotation.models import (
    WEBHOOK_TEST_EVENT,
    Project,
    Webhook,
    WebhookDelivery,
    WebhookDeliveryStatus,
    WebhookEvent,
)
from annotation.webhooks.delivery import webhook_delivery_enqueue_on_commit
from annotation.webhooks.events import message_id_new, webhook_payload
from annotation.webhooks.targets import WebhookTargetRefused, webhook_url_check

if TYPE_CHECKING:
    from django.contrib.auth.models import User

SECRET_BYTES = 24
# A project's webhooks, at most: each event writes a row per webhook in its transaction.
WEBHOOKS_PER_PROJECT = 20


def webhook_secret_new() -> str:
    """A Standard Webhooks secret: ``whsec_`` and 24 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode()


def _events_checked(events: Sequence[str]) -> list[str]:
    unknown = sorted(set(events) - set(WebhookEvent.values))
    if unknown:
        raise ValidationError({"events": f"Unknown events: {', '.join(unknown)}."})
    if not events:
        raise ValidationError({"events": "Pick at least one event."})
    # In the table's order, once each.
    return [event for event in WebhookEvent.values if event in events]


def _url_checked(url: str) -> str:
    try:
        webhook_url_check(url)
    except WebhookTargetRefused as refused:
        raise ValidationError({"url": str(refused)}) from None
    return url


def webhook_create(
    *,
    project: Project,
    user: User | None,
    url: str,
    events: Sequence[str],
    description: str = "",
    active: bool = True,
) -> Webhook:
    """A new webhook with a new secret. Raises ValidationError for a URL that may not be
    called (``targets``), unknown or no events, or a project at WEBHOOKS_PER_PROJECT."""
    checked = _events_checked(events)
    _url_checked(url)
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=project.pk).first()
        if Webhook.objects.filter(project=project).count() >= WEBHOOKS_PER_PROJECT:
            raise ValidationError(
                f"A project has at most {WEBHOOKS_PER_PROJECT} webhooks; delete one first."
            )
        return Webhook.objects.create(
            project=project,
            url=url,
            events=checked,
            description=description,
            active=active,
            secret=webhook_secret_new(),
            created_by=user,
        )


def webhook_update(*, webhook: Webhook, changes: dict[str, Any]) -> Webhook:
    """Change ``url``, ``events``, ``description`` or ``active``; ``rotate_secret`` makes a
    new secret (messages already waiting are signed with the new one when sent)."""
    if "events" in changes:
        webhook.events = _events_checked(changes["events"])
    if "url" in changes:
        webhook.url = _url_checked(changes["url"])
    for name in ("description", "active"):
        if name in changes:
            setattr(webhook, name, changes[name])
    if changes.get("rotate_secret"):
        webhook.secret = webhook_secret_new()
    webhook.save()
    return webhook


def webhook_delete(*, webhook: Webhook) -> None:
    """Delete the webhook and its delivery log; messages still waiting are dropped (their
    task finds no row)."""
    webhook.delete()


def webhook_test_send(*, webhook: Webhook) -> WebhookDelivery:
    """A ``webhook.test`` message to this webhook alone, whatever it subscribes to and
    even while it is paused, sent as any other (signed, retried, logged)."""
    with transaction.atomic():
        delivery = WebhookDelivery.objects.create(
            webhook=webhook,
            event=WEBHOOK_TEST_EVENT,
            message_id=message_id_new(),
            payload=webhook_payload(
                event=WEBHOOK_TEST_EVENT,
                project_id=webhook.project_id,
                data={"webhook": webhook.pk},
            ),
            next_attempt_at=timezone.now(),
        )
        webhook_delivery_enqueue_on_commit(delivery_id=delivery.pk)
    return delivery


def webhook_delivery_replay(*, delivery: WebhookDelivery) -> WebhookDelivery:
    """Send ``delivery``'s message again, now, as a new row (``replay_of``) with the same
    ``webhook-id`` and payload, so a receiver that deduplicates acts once. A row still
    PENDING (waiting for its next retry) is closed as FAILED, "replayed", so the message
    is not sent twice more."""
    with transaction.atomic():
        original = WebhookDelivery.objects.select_for_update().get(pk=delivery.pk)
        replay = WebhookDelivery.objects.create(
            webhook_id=original.webhook_id,
            event=original.event,
            message_id=original.message_id,
            payload=original.payload,
            replay_of=original,
            next_attempt_at=timezone.now(),
        )
        if original.status == WebhookDeliveryStatus.PENDING:
            original.status = WebhookDeliveryStatus.FAILED
            original.next_attempt_at = None
            said = original.last_error.rstrip(". ")
            replayed = f"Replayed as delivery {replay.pk}."
            original.last_error = f"{said}. {replayed}" if said else replayed
            original.save(update_fields=["status", "next_attempt_at", "last_error"])
        webhook_delivery_enqueue_on_commit(delivery_id=replay.pk)
    return replay
