"""Celery tasks of the PRM loop. Thin: ids in, one service call, nothing returned.

Training, scoring, simulation, machine-label and evaluation runs go to queue ``gpu``
(``CELERY_TASK_ROUTES``, by task name). They are ``acks_late``: a worker killed mid-run
leaves its message to be delivered again, which is safe because the services claim their
row under a lock and return quietly when it is not theirs to run (``services.runs``). The
services send these tasks by name and never import this module; torch is imported only
inside their worker-side code, so importing this module (as every process does, from the app's
``ready``) never imports torch."""

from __future__ import annotations

import logging
from typing import Any

from celery import Task, bootsteps, current_app, shared_task
from celery.signals import worker_ready
from django.db import connections

from annotation.models import Project
from prm_training.services.evaluation_runs import evaluation_run_execute
from prm_training.services.machine_label_work import machine_label_run_execute
from prm_training.services.runs import (
    AUTOSTART_TASK,
    EVALUATE_TASK,
    MACHINE_LABEL_TASK,
    REAP_EVERY_SECONDS,
    SCORE_TASK,
    SIMULATE_TASK,
    TRAIN_TASK,
    runs_dispatch_pending,
    runs_reap_stale,
)
from prm_training.services.scoring import scoring_run_execute
from prm_training.services.simulation import simulation_run_execute
from prm_training.services.training import (
    training_autostart_check_all,
    training_maybe_autostart,
    training_run_execute,
)

logger = logging.getLogger(__name__)


@shared_task(name=TRAIN_TASK, bind=True, acks_late=True, ignore_result=True)
def train_prm_task(self: Task, run_id: int) -> None:
    training_run_execute(
        run_id=run_id, task_id=self.request.id or "", worker=self.request.hostname or ""
    )


@shared_task(name=SCORE_TASK, bind=True, acks_late=True, ignore_result=True)
def score_chains_task(self: Task, scoring_run_id: int) -> None:
    scoring_run_execute(
        scoring_run_id=scoring_run_id,
        task_id=self.request.id or "",
        worker=self.request.hostname or "",
    )


@shared_task(name=SIMULATE_TASK, bind=True, acks_late=True, ignore_result=True)
def simulate_task(self: Task, simulation_run_id: int) -> None:
    simulation_run_execute(
        simulation_run_id=simulation_run_id,
        task_id=self.request.id or "",
        worker=self.request.hostname or "",
    )


@shared_task(name=MACHINE_LABEL_TASK, bind=True, acks_late=True, ignore_result=True)
def machine_labels_task(self: Task, run_id: int) -> None:
    machine_label_run_execute(
        run_id=run_id, task_id=self.request.id or "", worker=self.request.hostname or ""
    )


@shared_task(name=EVALUATE_TASK, bind=True, acks_late=True, ignore_result=True)
def evaluate_task(self: Task, run_id: int) -> None:
    evaluation_run_execute(
        run_id=run_id, task_id=self.request.id or "", worker=self.request.hostname or ""
    )


@shared_task(name=AUTOSTART_TASK, acks_late=True, ignore_result=True)
def autostart_check_task(project_id: int) -> None:
    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return
    training_maybe_autostart(project=project)


class DispatchPendingRuns(bootsteps.StartStopStep):
    """A consumer bootstep: its ``start`` runs each time the worker's consumer connects to
    the broker, the first time and after every reconnection (Celery restarts the consumer
    blueprint on a lost connection). So runs requested while Redis was down are sent as
    soon as any worker is back on it (``runs_dispatch_pending``), and the auto-retrain
    checks lost with it run here (``training_autostart_check_all``)."""

    requires = {"celery.worker.consumer.tasks:Tasks"}

    def start(self, c: Any) -> None:
        try:
            sent = runs_dispatch_pending()
            sent["autostarted"] = training_autostart_check_all()
        except Exception:  # noqa: BLE001 - never keep the worker from consuming
            logger.exception("Dispatching pending runs failed")
        else:
            if any(sent.values()):
                logger.warning("Dispatched runs that waited for the broker: %s", sent)
        finally:
            # Not inside a task, so Django's per-task cleanup does not cover this: close the
            # main process's connection rather than leave it to pool children forked later.
            connections.close_all()


class ReapStaleRuns(bootsteps.StartStopStep):
    """A worker bootstep: every REAP_EVERY_SECONDS the worker's main process marks runs
    whose heartbeat went silent as lost (``runs_reap_stale``), so a run whose process was
    killed (out of memory, say) shows as failed within a minute of its last heartbeat,
    whether or not anyone is looking at it."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        self.tref: Any = None

    def start(self, worker: Any) -> None:
        self.tref = worker.timer.call_repeatedly(REAP_EVERY_SECONDS, _reap_stale_runs)

    def stop(self, worker: Any) -> None:
        if self.tref is not None:
            self.tref.cancel()
            self.tref = None


def _reap_stale_runs() -> None:
    try:
        runs_reap_stale()
    except Exception:  # noqa: BLE001 - a failed reap is tried again at the next tick
        logger.exception("Reaping stale runs failed")
    finally:
        # The main process forks pool children later: none may inherit an open connection.
        connections.close_all()


# Registered when the worker imports its task modules, before it builds its consumer.
current_app.steps["consumer"].add(DispatchPendingRuns)
current_app.steps["worker"].add(ReapStaleRuns)


@worker_ready.connect
def reap_orphaned_runs(sender: Any = None, **kwargs: Any) -> None:
    """A worker that starts under a node name reaps the runs its earlier process left
    RUNNING when it was killed (see ``services.runs.runs_reap_stale``)."""
    hostname = getattr(sender, "hostname", "") or ""
    try:
        runs_reap_stale(worker=hostname)
    except Exception:  # noqa: BLE001 - a reap failure must not keep the worker from starting
        logger.exception("Reaping orphaned runs failed")
