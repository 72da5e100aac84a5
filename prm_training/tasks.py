"""Celery tasks of the PRM loop. Thin: ids in, one service call, nothing returned.

Training and scoring go to queue ``gpu`` (``CELERY_TASK_ROUTES`` routes this module
there). They are ``acks_late``: a worker killed mid-run leaves its message to be delivered
again, which is safe because the services claim their row under a lock and return quietly
when it is not theirs to run. Services are imported inside the task bodies, and torch only
inside the services' worker-side code, so importing this module (as the web process does
to enqueue) never imports torch."""
from __future__ import annotations

import logging
from typing import Any

from celery import Task, shared_task
from celery.signals import worker_ready

logger = logging.getLogger(__name__)


@shared_task(name="prm_training.train", bind=True, acks_late=True, ignore_result=True)
def train_prm_task(self: Task, run_id: int) -> None:
    from prm_training.services.training import training_run_execute

    training_run_execute(
        run_id=run_id, task_id=self.request.id or "", worker=self.request.hostname or ""
    )


@shared_task(name="prm_training.score", bind=True, acks_late=True, ignore_result=True)
def score_chains_task(self: Task, scoring_run_id: int) -> None:
    from prm_training.services.scoring import scoring_run_execute

    scoring_run_execute(scoring_run_id=scoring_run_id, task_id=self.request.id or "")


@shared_task(name="prm_training.autostart_check", acks_late=True, ignore_result=True)
def autostart_check_task(project_id: int) -> None:
    from annotation.models import Project
    from prm_training.services.training import training_maybe_autostart

    project = Project.objects.filter(pk=project_id).first()
    if project is None:
        return
    training_maybe_autostart(project=project)


@worker_ready.connect
def reap_orphaned_runs(sender: Any = None, **kwargs: Any) -> None:
    """A worker that starts under a node name reaps the runs its earlier process left
    RUNNING when it was killed (see ``training_run_reap_stale``)."""
    from prm_training.services.training import training_run_reap_stale

    hostname = getattr(sender, "hostname", "") or ""
    try:
        training_run_reap_stale(worker=hostname)
    except Exception:  # noqa: BLE001 - a reap failure must not keep the worker from starting
        logger.exception("Reaping orphaned training runs failed")
