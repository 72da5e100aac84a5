"""Sending outbox rows: one attempt per task, on queue ``default``, never in a request.

An attempt claims its row first (PENDING and due, under the row lock: ``attempts`` + 1 and
``next_attempt_at`` pushed CLAIM_SECONDS ahead, so neither the sweep nor a second copy of
the message sends it meanwhile), then posts the signed message outside any transaction
with short timeouts (CONNECT_SECONDS, READ_SECONDS; the body of the answer is not read),
and writes what came of it: DELIVERED on a 2xx; otherwise PENDING again, due after the
next of ``retry_delays()`` (30 s, 2 min, 10 min, 45 min: five attempts over about an
hour), or FAILED once they are used up. A slow or dead receiver thus costs one worker a
few seconds per attempt and never holds a request or another delivery's row.

Rows the broker never got (it was down when the change committed), and attempts whose
worker died, are sent by ``webhook_deliveries_dispatch_due``: each worker runs it when it
(re)connects to the broker and every SWEEP_SECONDS (``annotation.tasks``). Sending a row
twice is harmless: the second task finds it claimed or done and returns.

Signing is the ``standardwebhooks`` package's: the receiver verifies with the same
package (or any Standard Webhooks library) and the webhook's ``whsec_`` secret."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone
from standardwebhooks.webhooks import Webhook as Signer

from annotation.models import WebhookDelivery, WebhookDeliveryStatus
from annotation.webhooks.targets import WebhookTargetRefused, webhook_target

logger = logging.getLogger(__name__)

DELIVER_TASK = "annotation.webhook_deliver"
CONNECT_SECONDS = 3.0
READ_SECONDS = 5.0
# Longer than the task's time limit (settings: CELERY_TASK_ANNOTATIONS), so a claimed row
# is sent again only when its attempt is surely over.
CLAIM_SECONDS = 120
SWEEP_SECONDS = 30.0
PRUNE_SECONDS = 3600.0
# The periodic sweep leaves rows due for less than this to the message already on its way.
SWEEP_GRACE_SECONDS = 60
ERROR_MAX_CHARS = 500
USER_AGENT = "Steplab-Webhooks/1"


def retry_delays() -> list[int]:
    """Seconds to wait after each failed attempt before the next; one more attempt than
    delays in all. STEPLAB_WEBHOOK_RETRY_SECONDS (comma-separated) from the environment,
    read at call time so a worker started with it uses it; 30,120,600,2700 by default."""
    raw = os.environ.get("STEPLAB_WEBHOOK_RETRY_SECONDS", "30,120,600,2700")
    return [max(0, int(part)) for part in raw.split(",") if part.strip()]


def signed_request(*, secret: str, message_id: str, body: str, at: datetime) -> dict[str, str]:
    """The headers of one attempt: the Standard Webhooks trio and the content type."""
    signature = Signer(secret).sign(msg_id=message_id, timestamp=at, data=body)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(at.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }


def payload_body(payload: object) -> str:
    """The bytes signed and sent (compact JSON, keys as stored)."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


# --- enqueue and sweep --------------------------------------------------------------------


def webhook_delivery_enqueue(*, delivery_id: int, countdown: float = 0) -> bool:
    """Send the row's task (after a commit, so it must not raise): whether the broker
    took it. When it did not, the row waits for the sweep."""
    try:
        current_app.tasks[DELIVER_TASK].apply_async(
            (delivery_id,), queue="default", countdown=countdown or None
        )
    except Exception:  # noqa: BLE001 - the row is the outbox; a worker's sweep sends it
        logger.warning("Broker unreachable: webhook delivery %s waits", delivery_id, exc_info=True)
        return False
    return True


def webhook_delivery_enqueue_on_commit(*, delivery_id: int) -> None:
    transaction.on_commit(lambda: webhook_delivery_enqueue(delivery_id=delivery_id))


def webhook_deliveries_dispatch_due(*, grace_seconds: float = 0, limit: int = 1000) -> int:
    """Send the PENDING rows due for at least ``grace_seconds`` (oldest first, at most
    ``limit``); how many the broker took."""
    cutoff = timezone.now() - timedelta(seconds=grace_seconds)
    due = (
        WebhookDelivery.objects.filter(
            status=WebhookDeliveryStatus.PENDING, next_attempt_at__lte=cutoff
        )
        .order_by("next_attempt_at")
        .values_list("pk", flat=True)[:limit]
    )
    return sum(webhook_delivery_enqueue(delivery_id=pk) for pk in list(due))


def webhook_deliveries_prune(*, batch: int = 1000) -> int:
    """Delete delivered and failed rows older than STEPLAB_WEBHOOK_LOG_DAYS, ``batch`` at a
    time (short transactions on a big log); how many went. PENDING rows stay, whatever
    their age: they are the outbox."""
    cutoff = timezone.now() - timedelta(days=settings.STEPLAB_WEBHOOK_LOG_DAYS)
    old = WebhookDelivery.objects.exclude(status=WebhookDeliveryStatus.PENDING).filter(
        created_at__lt=cutoff
    )
    removed = 0
    while True:
        ids = list(old.values_list("pk", flat=True)[:batch])
        if not ids:
            return removed
        removed += WebhookDelivery.objects.filter(pk__in=ids).delete()[0]


# --- one attempt (worker side) ------------------------------------------------------------


@dataclass(frozen=True)
class _Claimed:
    delivery_id: int
    attempt: int
    url: str
    secret: str
    message_id: str
    body: str


@dataclass(frozen=True)
class Outcome:
    """What one attempt got: a status code (None when no answer came), the time it took
    and, when it failed, why."""

    status_code: int | None
    response_ms: int | None
    error: str = ""

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def webhook_delivery_attempt(*, delivery_id: int) -> WebhookDelivery | None:
    """One attempt at the row ``delivery_id`` (the task's body): None when there is
    nothing to do (gone, not PENDING, not due, or claimed by another attempt), else the
    row as it ended. A retry is sent with its countdown."""
    claimed = _claim(delivery_id)
    if claimed is None:
        return None
    outcome = _post(claimed)
    delivery, retry_in = _record(claimed, outcome)
    if retry_in is not None:
        webhook_delivery_enqueue(delivery_id=delivery_id, countdown=retry_in)
    return delivery


def _claim(delivery_id: int) -> _Claimed | None:
    now = timezone.now()
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("webhook")
            .filter(
                pk=delivery_id,
                status=WebhookDeliveryStatus.PENDING,
                next_attempt_at__lte=now,
            )
            .first()
        )
        if delivery is None:
            return None
        delivery.attempts += 1
        delivery.last_attempt_at = now
        delivery.next_attempt_at = now + timedelta(seconds=CLAIM_SECONDS)
        delivery.save(update_fields=["attempts", "last_attempt_at", "next_attempt_at"])
    return _Claimed(
        delivery_id=delivery.pk,
        attempt=delivery.attempts,
        url=delivery.webhook.url,
        secret=delivery.webhook.secret,
        message_id=delivery.message_id,
        body=payload_body(delivery.payload),
    )


def _post(claimed: _Claimed) -> Outcome:
    """Post the signed message; never raises. The answer's body is not read: only its
    status counts, and a receiver that streams an endless body cannot hold the worker."""
    try:
        target = webhook_target(claimed.url)
    except WebhookTargetRefused as refused:
        return Outcome(status_code=None, response_ms=None, error=str(refused))
    headers = signed_request(
        secret=claimed.secret,
        message_id=claimed.message_id,
        body=claimed.body,
        at=datetime.now(UTC),
    )
    headers["host"] = target.host
    timeout = httpx.Timeout(READ_SECONDS, connect=CONNECT_SECONDS)
    started = time.monotonic()
    try:
        with (
            httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client,
            client.stream(
                "POST",
                target.url,
                content=claimed.body.encode(),
                headers=headers,
                extensions={"sni_hostname": target.server_name},
            ) as answer,
        ):
            code = answer.status_code
    except httpx.HTTPError as exc:
        elapsed = round((time.monotonic() - started) * 1000)
        return Outcome(status_code=None, response_ms=elapsed, error=_describe(exc))
    elapsed = round((time.monotonic() - started) * 1000)
    error = "" if 200 <= code < 300 else f"The receiver answered {code}."
    return Outcome(status_code=code, response_ms=elapsed, error=error)


def _describe(exc: httpx.HTTPError) -> str:
    kinds: dict[type[httpx.HTTPError], str] = {
        httpx.ConnectTimeout: "No connection within the timeout",
        httpx.ReadTimeout: "No answer within the timeout",
        httpx.ConnectError: "Could not connect",
    }
    kind = kinds.get(type(exc), type(exc).__name__)
    said = f"{kind}: {exc}"[: ERROR_MAX_CHARS - 1].rstrip(". ")
    return f"{said}."


def _record(claimed: _Claimed, outcome: Outcome) -> tuple[WebhookDelivery | None, float | None]:
    """Write the attempt's outcome if the row is still this attempt's; the row and the
    seconds until its retry (None: no retry)."""
    now = timezone.now()
    delays = retry_delays()
    with transaction.atomic():
        delivery = (
            WebhookDelivery.objects.select_for_update()
            .filter(pk=claimed.delivery_id, attempts=claimed.attempt)
            .first()
        )
        if delivery is None or delivery.status != WebhookDeliveryStatus.PENDING:
            return delivery, None
        delivery.last_status_code = outcome.status_code
        delivery.response_ms = outcome.response_ms
        delivery.last_error = outcome.error[:ERROR_MAX_CHARS]
        retry_in: float | None = None
        if outcome.delivered:
            delivery.status = WebhookDeliveryStatus.DELIVERED
            delivery.delivered_at = now
            delivery.next_attempt_at = None
        elif delivery.attempts > len(delays):
            delivery.status = WebhookDeliveryStatus.FAILED
            delivery.next_attempt_at = None
        else:
            # Counted from the attempt's start, so a slow receiver's time is part of it.
            started = delivery.last_attempt_at or now
            due = max(now, started + timedelta(seconds=delays[delivery.attempts - 1]))
            delivery.next_attempt_at = due
            retry_in = (due - now).total_seconds()
        delivery.save()
    return delivery, retry_in
