"""Celery tasks of the annotation app. Thin: ids in, one service call, nothing returned.

The import and bulk-action tasks run on queue ``default``. Neither is ``acks_late``: a
redelivered task would find its job no longer QUEUED and return, so a worker killed
mid-way leaves the job RUNNING (and nothing written: each is one transaction) rather
than doing it twice (see ``datasets.import_jobs``, ``chains.bulk_actions``).

A routing pass (``routing.services``) runs on ``default`` too, by project id; a second
delivery or two passes at once do no harm, since a pass decides each chain from the
labels and rules as they stand (under the chains' row locks) and writes only changes.

A webhook delivery is one attempt at one outbox row (``webhooks.delivery``), on
``default`` with a one-minute limit (its request times out long before). Each worker
also sends the rows left waiting: when it (re)connects to the broker and every
``SWEEP_SECONDS`` from its main process."""

from __future__ import annotations

import logging
from typing import Any

from celery import bootsteps, current_app, shared_task
from django.db import connections

from annotation.chains.bulk_actions import BULK_TASK
from annotation.datasets.import_jobs import IMPORT_TASK
from annotation.routing.services import ROUTE_TASK
from annotation.webhooks.delivery import (
    DELIVER_TASK,
    PRUNE_SECONDS,
    SWEEP_GRACE_SECONDS,
    SWEEP_SECONDS,
    webhook_deliveries_dispatch_due,
    webhook_deliveries_prune,
)

logger = logging.getLogger(__name__)


@shared_task(name=IMPORT_TASK, ignore_result=True)
def import_job_task(job_id: int) -> None:
    from annotation.datasets.import_jobs import import_job_execute

    import_job_execute(job_id=job_id)


@shared_task(name=BULK_TASK, ignore_result=True)
def bulk_action_task(job_id: int) -> None:
    from annotation.chains.bulk_actions import bulk_action_execute

    bulk_action_execute(job_id=job_id)


@shared_task(name=ROUTE_TASK, ignore_result=True)
def chains_route_task(project_id: int) -> None:
    from annotation.models import Project
    from annotation.routing.services import chains_route

    project = Project.objects.filter(pk=project_id).first()
    if project is None:  # deleted since the pass was sent
        return
    outcome = chains_route(project=project)
    logger.info("Routed project %s: %d chains changed", project_id, outcome.changed)


@shared_task(name=DELIVER_TASK, ignore_result=True, time_limit=60, soft_time_limit=50)
def webhook_deliver_task(delivery_id: int) -> None:
    from annotation.webhooks.delivery import webhook_delivery_attempt

    webhook_delivery_attempt(delivery_id=delivery_id)


def _dispatch_webhooks(grace_seconds: float) -> None:
    try:
        sent = webhook_deliveries_dispatch_due(grace_seconds=grace_seconds)
    except Exception:  # noqa: BLE001 - never keep the worker from consuming; tried again
        logger.exception("Sending waiting webhook deliveries failed")
    else:
        if sent:
            logger.warning("Sent %d webhook deliveries that waited", sent)
    finally:
        # Not inside a task: the main process forks pool children later, and none may
        # inherit an open connection.
        connections.close_all()


class DispatchPendingWebhooks(bootsteps.StartStopStep):
    """A consumer bootstep: each time the worker (re)connects to the broker, the rows
    whose message the broker never took (it was down when they committed) are sent."""

    requires = {"celery.worker.consumer.tasks:Tasks"}

    def start(self, c: Any) -> None:
        _dispatch_webhooks(0)


def _prune_webhook_log() -> None:
    try:
        webhook_deliveries_prune()
    except Exception:  # noqa: BLE001 - pruned at the next tick
        logger.exception("Pruning the webhook delivery log failed")
    finally:
        connections.close_all()


class SweepWebhooks(bootsteps.StartStopStep):
    """A worker bootstep: every SWEEP_SECONDS the main process sends the rows due for a
    while with no task on its way (a lost countdown, an attempt whose worker died), and
    every PRUNE_SECONDS it prunes the delivery log (``webhook_deliveries_prune``)."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        self.trefs: list[Any] = []

    def start(self, worker: Any) -> None:
        self.trefs = [
            worker.timer.call_repeatedly(SWEEP_SECONDS, _dispatch_webhooks, (SWEEP_GRACE_SECONDS,)),
            worker.timer.call_repeatedly(PRUNE_SECONDS, _prune_webhook_log),
        ]

    def stop(self, worker: Any) -> None:
        for tref in self.trefs:
            tref.cancel()
        self.trefs = []


# How often a worker deletes expired session rows (an anonymous one lives an hour at most:
# annotation/sessions.py); Django leaves them to a ``clearsessions`` nobody runs.
SESSION_PRUNE_SECONDS = 3600.0


def sessions_prune() -> None:
    """Delete the session rows past their expiry (``SessionStore.clear_expired``)."""
    from annotation.sessions import SessionStore

    try:
        SessionStore.clear_expired()
    except Exception:  # noqa: BLE001 - pruned at the next tick
        logger.exception("Pruning expired sessions failed")
    finally:
        connections.close_all()


class PruneSessions(bootsteps.StartStopStep):
    """A worker bootstep: every SESSION_PRUNE_SECONDS, and once at start, the main
    process deletes expired session rows."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        self.tref: Any = None

    def start(self, worker: Any) -> None:
        worker.timer.call_after(5.0, sessions_prune)
        self.tref = worker.timer.call_repeatedly(SESSION_PRUNE_SECONDS, sessions_prune)

    def stop(self, worker: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
        self.tref = None


current_app.steps["consumer"].add(DispatchPendingWebhooks)
current_app.steps["worker"].add(SweepWebhooks)
current_app.steps["worker"].add(PruneSessions)
