"""The lifecycle every PRM run shares, training, scoring, simulation, machine-label and
evaluation runs alike: sent to a worker
through an outbox, claimed under a row lock, kept alive by a heartbeat, reaped when its
worker is lost, finished by the attempt that owns it.

How a run survives the broker. Its task is ``acks_late``, so a worker that dies loses no
message, and Redis hands an unacknowledged message out again once its visibility timeout
has passed (12 h by default). Executing a run is therefore idempotent: ``run_claim``
moves the row QUEUED -> RUNNING under ``SELECT ... FOR UPDATE``, and a second delivery of a
run that is RUNNING with a fresh heartbeat, or finished, gets None and returns.

A killed worker leaves its run RUNNING. Waiting 12 h for the redelivery is too long, so
``runs_reap_stale`` marks such runs FAILED ("worker lost"): a worker that starts reaps the
runs recorded under its own node name (one node name is one process, so a run still
RUNNING under it when the node starts was orphaned), and runs whose heartbeat is older
than ``stale_after()`` (STEPLAB_TRAINING_STALE_SECONDS, 40 s) are reaped by every worker
every REAP_EVERY_SECONDS and by the API and the ML page whenever they read a project's
runs, so a dead run shows as such within a minute even with no worker left. The heartbeat
comes from a thread of the run's own process every 10 s (``progress.run_kept_alive``),
however long a step takes. A redelivery that finds a stale run RUNNING takes it over
itself if ``attempts`` is below ``MAX_ATTEMPTS``. A reaped run is not restarted: ML staff
retry it, which starts a new run with its settings (``retry_of``).

Cancelling: a QUEUED run is CANCELLED at once (its task finds it so and returns); a
RUNNING one gets ``cancel_requested``, which its progress report reads once a second and
stops at, between two batches (``progress.RunProgress``).

How much may wait. A person's start (training, scoring, simulation, machine labels, and
their retries) is admitted only while fewer runs of its kind than STEPLAB_RUN_LIMITS
allows are queued or running in its project and on the node; otherwise
``run_admission_check`` raises TooManyWaiting (the API's 429), naming what waits. The
check and the new row share one transaction, under a lock per kind (PostgreSQL's
advisory lock), so two starts at once cannot both pass it.

The row is the outbox. A run is sent after its row commits; when the broker is
unreachable the row stays QUEUED with ``enqueued_at`` empty and ``runs_dispatch_pending``
sends it once a worker reaches the broker again.

Tasks are sent by name through Celery's registry (the app registers ``prm_training.tasks``
in ``ready()``): the task module calls the services, never the other way round."""

from __future__ import annotations

import logging
import os
import shutil
import traceback
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from celery import current_app
from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from annotation.work_limits import TooManyWaiting
from prm_training.models import (
    FINISHED_STATUSES,
    EvaluationRun,
    MachineLabelRun,
    RunStatus,
    ScoringRun,
    SimulationRun,
    TrainingRun,
)
from prm_training.services.webhooks import run_finished_emit

logger = logging.getLogger(__name__)

TRAIN_TASK = "prm_training.train"
SCORE_TASK = "prm_training.score"
SIMULATE_TASK = "prm_training.simulate"
MACHINE_LABEL_TASK = "prm_training.machine_labels"
EVALUATE_TASK = "prm_training.evaluate"
AUTOSTART_TASK = "prm_training.autostart_check"

# A run whose worker died is taken over by a redelivery at most this many times in all.
MAX_ATTEMPTS = 2

Run = TrainingRun | ScoringRun | SimulationRun | MachineLabelRun | EvaluationRun
R = TypeVar("R", TrainingRun, ScoringRun, SimulationRun, MachineLabelRun, EvaluationRun)
RUN_TASKS: dict[type[Run], str] = {
    TrainingRun: TRAIN_TASK,
    ScoringRun: SCORE_TASK,
    SimulationRun: SIMULATE_TASK,
    MachineLabelRun: MACHINE_LABEL_TASK,
    EvaluationRun: EVALUATE_TASK,
}


# The kinds of run people start, by the names STEPLAB_RUN_LIMITS knows them by.
RUN_LIMIT_KINDS: dict[type[Run], str] = {
    TrainingRun: "training",
    ScoringRun: "scoring",
    SimulationRun: "simulation",
    MachineLabelRun: "machine_label",
}
# The advisory lock's key: "steplab" in ASCII, then the kind's index in RUN_LIMIT_KINDS.
_ADMISSION_LOCK = 0x737465706C6162 << 8


def run_admission_check(run_model: type[Run], *, project_id: int) -> None:
    """Raise TooManyWaiting when ``project_id`` already has its limit of queued or
    running runs of ``run_model``'s kind, or the node (every project) has its own; the
    project's stale runs are reaped first, so a lost worker's run does not count.

    Precondition: called inside the transaction that creates the run, which then holds
    this kind's lock until it commits (PostgreSQL; SQLite writes one at a time anyway)."""
    kind = RUN_LIMIT_KINDS[run_model]
    limits = django_settings.STEPLAB_RUN_LIMITS[kind]
    runs_reap_stale_of_project(project_id=project_id)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s)",
                [_ADMISSION_LOCK + list(RUN_LIMIT_KINDS.values()).index(kind)],
            )
    active = run_model.objects.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING])
    waiting = [
        {"id": pk, "status": status, "created_at": created_at.isoformat()}
        for pk, status, created_at in active.filter(project_id=project_id)
        .order_by("created_at", "pk")
        .values_list("pk", "status", "created_at")
    ]
    noun = f"{run_model._meta.verbose_name}s"
    listed = ", ".join(f"#{run['id']} {run['status']}" for run in waiting) or "none"
    most, variable = limits["project"]
    if len(waiting) >= most:
        raise TooManyWaiting(
            f"This project has {len(waiting)} {noun} queued or running ({listed}); at most "
            f"{most} may be ({variable}). Wait for one to finish, or cancel one.",
            waiting=waiting,
            limit=most,
        )
    most, variable = limits["node"]
    on_node = active.count()
    if on_node >= most:
        raise TooManyWaiting(
            f"The node has {on_node} {noun} queued or running in all projects (this "
            f"project's: {listed}); at most {most} may be ({variable}). Try again when "
            "one has finished.",
            waiting=waiting,
            limit=most,
        )


def model_dir_root() -> Path:
    """Where checkpoints go: ``STEPLAB_MODEL_DIR`` from the environment (read at call time,
    so a worker started with it uses it) or the setting of that name, else ``var/models``."""
    configured = os.environ.get("STEPLAB_MODEL_DIR") or getattr(
        django_settings, "STEPLAB_MODEL_DIR", ""
    )
    return Path(configured) if configured else Path(django_settings.BASE_DIR) / "var" / "models"


def feature_cache_dir() -> Path:
    """Where the worker keeps frozen backbones' step features, so each chain goes through
    a backbone once, not once per round or per worker restart: ``STEPLAB_FEATURE_CACHE_DIR``
    from the environment, else ``feature-cache`` under the model directory. One folder per
    backbone, window length, pooling and text layout (``ml.features.feature_cache``);
    about 6 KB per step for a 7B backbone in float16, removable at any time."""
    configured = os.environ.get("STEPLAB_FEATURE_CACHE_DIR")
    return Path(configured) if configured else model_dir_root() / "feature-cache"


def stale_after() -> timedelta:
    """How long a RUNNING run's heartbeat may be silent before its worker counts as lost:
    STEPLAB_TRAINING_STALE_SECONDS, 40 by default (four missed heartbeats)."""
    return timedelta(seconds=float(os.environ.get("STEPLAB_TRAINING_STALE_SECONDS", "40")))


# Workers reap stale runs this often (``tasks.ReapStaleRuns``).
REAP_EVERY_SECONDS = 15.0


def training_attempt_dir(run: TrainingRun) -> Path:
    """One checkpoint directory per attempt: a takeover never trains into a dead attempt's
    leftovers."""
    return model_dir_root() / f"project-{run.project_id}" / f"run-{run.pk}-a{run.attempts}"


def simulation_attempt_dir(run: SimulationRun) -> Path:
    """A simulation attempt's scratch directory (its rounds' checkpoints), one per attempt
    as a training run's; removed when the attempt ends or is reaped."""
    return model_dir_root() / f"project-{run.project_id}" / f"simulation-{run.pk}-a{run.attempts}"


def _leftovers_remove(run: Run) -> None:
    """What a lost or finished attempt leaves on disk: a training attempt's checkpoint
    directory (its ModelVersion, if any, points at a directory of its own), a simulation
    attempt's scratch directory."""
    if isinstance(run, TrainingRun) and run.attempts:
        shutil.rmtree(training_attempt_dir(run), ignore_errors=True)
    if isinstance(run, SimulationRun) and run.attempts:
        shutil.rmtree(simulation_attempt_dir(run), ignore_errors=True)


# --- sending -----------------------------------------------------------------------------


def task_send(name: str, args: tuple[Any, ...], **options: Any) -> None:
    """Send the task registered under ``name`` to a worker (never run here). Raises what
    the broker raises."""
    current_app.tasks[name].apply_async(args, **options)


def run_enqueue(run_model: type[Run], run_id: int) -> bool:
    """Send the run's task and stamp ``enqueued_at``. Runs after the commit, so a request
    that started the run must not fail here: when the broker is unreachable the row stays
    QUEUED with ``enqueued_at`` empty and ``runs_dispatch_pending`` sends it later. Returns
    whether the broker took it."""
    try:
        task_send(RUN_TASKS[run_model], (run_id,))
    except Exception:  # noqa: BLE001 - the row is the outbox; a worker re-sends it
        logger.warning(
            "Broker unreachable: %s %s waits to be sent",
            run_model._meta.verbose_name,
            run_id,
            exc_info=True,
        )
        return False
    run_model.objects.filter(pk=run_id, enqueued_at__isnull=True).update(enqueued_at=timezone.now())
    return True


def run_enqueue_on_commit(run: Run) -> None:
    """Send ``run`` once the current transaction commits, so a worker never looks for a
    row that was rolled back."""
    run_model, run_id = type(run), run.pk
    transaction.on_commit(lambda: run_enqueue(run_model, run_id))


def runs_dispatch_pending() -> dict[str, int]:
    """Send what waited for the broker: QUEUED training, scoring, simulation,
    machine-label and evaluation runs whose enqueue failed (``enqueued_at`` empty). Called by every
    worker each time it (re)connects to the broker (``tasks.DispatchPendingRuns``, which
    then runs the auto-retrain checks that may have been lost with the broker).

    Two workers reconnecting at once may both send a run; that is harmless, since the
    task claims its row QUEUED -> RUNNING under a lock and a second delivery returns."""
    waiting = {"status": RunStatus.QUEUED, "enqueued_at__isnull": True}
    training = TrainingRun.objects.filter(**waiting, cancel_requested=False)
    scoring = ScoringRun.objects.filter(**waiting)
    simulation = SimulationRun.objects.filter(**waiting)
    machine_labels = MachineLabelRun.objects.filter(**waiting)
    evaluation = EvaluationRun.objects.filter(**waiting)
    return {
        "training": sum(run_enqueue(TrainingRun, pk) for pk in _ids(training)),
        "scoring": sum(run_enqueue(ScoringRun, pk) for pk in _ids(scoring)),
        "simulation": sum(run_enqueue(SimulationRun, pk) for pk in _ids(simulation)),
        "machine_labels": sum(run_enqueue(MachineLabelRun, pk) for pk in _ids(machine_labels)),
        "evaluation": sum(run_enqueue(EvaluationRun, pk) for pk in _ids(evaluation)),
    }


def _ids(runs: Any) -> list[int]:
    return list(runs.order_by("pk").values_list("pk", flat=True))


# --- claim, heartbeat, finish (worker side) ----------------------------------------------


def run_claim(
    run_model: type[R],
    run_id: int,
    *,
    task_id: str,
    worker: str,
    reset: dict[str, Any] | None = None,
) -> R | None:
    """QUEUED -> RUNNING under the row lock, with ``reset`` (the fields a new attempt
    starts from) written too, or None when there is nothing to do: the run is gone,
    finished, or RUNNING under a live heartbeat. A stale RUNNING run is taken over (its
    attempt's leftovers removed) unless it used ``MAX_ATTEMPTS``; then it fails."""
    now = timezone.now()
    with transaction.atomic():
        run = run_model.objects.select_for_update().filter(pk=run_id).first()
        if run is None or run.status in FINISHED_STATUSES:
            return None
        if run.status == RunStatus.RUNNING:
            fresh = run.heartbeat_at is not None and run.heartbeat_at >= now - stale_after()
            if fresh:
                return None
            _leftovers_remove(run)
            if run.attempts >= MAX_ATTEMPTS:
                run.status = RunStatus.FAILED
                run.finished_at = now
                run.error = f"Worker lost {run.attempts} times; giving up."
                run.save(update_fields=["status", "finished_at", "error"])
                run_finished_emit(run, status=run.status)
                return None
        if run.cancel_requested:
            run.status = RunStatus.CANCELLED
            run.finished_at = now
            run.save(update_fields=["status", "finished_at"])
            run_finished_emit(run, status=run.status)
            return None
        run.status = RunStatus.RUNNING
        run.attempts += 1
        run.started_at = now
        run.heartbeat_at = now
        run.celery_task_id = task_id
        run.worker = worker
        run.error = ""
        run.phase = {}
        for name, value in (reset or {}).items():
            setattr(run, name, value)
        run.save()
    return run


def _owned(run: Run) -> Any:
    """The run's row while this attempt still owns it (it may have been reaped or taken
    over since)."""
    return type(run).objects.filter(pk=run.pk, status=RunStatus.RUNNING, attempts=run.attempts)


def run_may_go_on(run: Run) -> bool:
    """Whether this attempt still owns ``run`` and nobody asked it to stop."""
    return bool(_owned(run).filter(cancel_requested=False).exists())


def run_cancel(run: R) -> R:
    """Cancel ``run`` (module docstring): at once when QUEUED, at its next progress check
    when RUNNING. Raises ValidationError once it has finished."""
    with transaction.atomic():
        run = type(run).objects.select_for_update().get(pk=run.pk)
        if run.status in FINISHED_STATUSES:
            raise ValidationError(f"The run is already {run.status}.")
        if run.status == RunStatus.QUEUED:
            run.status = RunStatus.CANCELLED
            run.finished_at = timezone.now()
        run.cancel_requested = True
        run.save(update_fields=["status", "finished_at", "cancel_requested"])
        if run.status == RunStatus.CANCELLED:
            run_finished_emit(run, status=run.status)
    return run


def run_retry_check(run: Run) -> None:
    """A run is retried (a new run with its settings) once it has failed or was
    cancelled; raises ValidationError otherwise."""
    if run.status not in (RunStatus.FAILED, RunStatus.CANCELLED):
        raise ValidationError(
            f"Only a failed or cancelled run is retried; this one is {run.status}."
        )


def run_heartbeat(run: Run, **fields: Any) -> None:
    """Stamp this attempt's heartbeat, with ``fields`` (progress, counts) in the same
    update. A no-op once the attempt no longer owns the run."""
    type(run).objects.filter(pk=run.pk, attempts=run.attempts).update(
        heartbeat_at=timezone.now(), **fields
    )


def run_finish(run: Run, *, status: str, error: str = "", **fields: Any) -> bool:
    """End this attempt's run with ``status`` (and ``fields``), if the attempt still owns
    it; its leftovers are removed. Returns whether it did."""
    with transaction.atomic():
        updated = _owned(run).update(
            status=status, error=error[:10_000], finished_at=timezone.now(), **fields
        )
        if updated:
            run_finished_emit(run, status=status, error=error, **fields)
    if updated and status != RunStatus.SUCCEEDED:
        _leftovers_remove(run)
    return bool(updated)


# --- the reaper --------------------------------------------------------------------------


def runs_reap_stale_of_project(*, project_id: int) -> int:
    """``runs_reap_stale`` for one project's runs, after one cheap read that usually finds
    nothing to reap (the API and the ML page call it on every read of the runs)."""
    cutoff = timezone.now() - stale_after()
    silent = Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=cutoff)
    if not any(
        model.objects.filter(silent, project_id=project_id, status=RunStatus.RUNNING).exists()
        for model in RUN_TASKS
    ):
        return 0
    return runs_reap_stale(project_id=project_id)


def runs_reap_stale(
    *, worker: str = "", now: datetime | None = None, project_id: int | None = None
) -> int:
    """Mark FAILED the RUNNING runs (of ``project_id``, else of every project) whose worker
    is gone: those recorded under ``worker`` (called when a worker node starts, so its own
    earlier process is dead) and those whose heartbeat is older than ``stale_after()``.
    Returns how many runs were reaped.

    A training run's partial checkpoint directory is removed; no ModelVersion exists for
    it, and the active version is untouched. A scoring run keeps the priorities it wrote
    (each chunk was whole)."""
    now = now or timezone.now()
    reaped = 0
    for run_model in RUN_TASKS:
        with transaction.atomic():
            candidates = run_model.objects.select_for_update(skip_locked=True).filter(
                status=RunStatus.RUNNING
            )
            if project_id is not None:
                candidates = candidates.filter(project_id=project_id)
            for run in candidates:
                orphaned = bool(worker) and run.worker == worker
                silent = run.heartbeat_at is None or run.heartbeat_at < now - stale_after()
                if not (orphaned or silent):
                    continue
                run.status = RunStatus.FAILED
                run.finished_at = now
                run.error = (
                    f"Worker lost: {run.worker or 'unknown worker'} stopped while running "
                    f"(attempt {run.attempts}; its last sign of life "
                    f"{_ago(run.heartbeat_at, now)}). Retry it to start a new run."
                )
                run.save(update_fields=["status", "finished_at", "error"])
                run_finished_emit(run, status=run.status)
                _leftovers_remove(run)
                reaped += 1
    if reaped:
        logger.warning("Reaped %d run(s) whose worker was lost.", reaped)
    return reaped


def _ago(moment: datetime | None, now: datetime) -> str:
    if moment is None:
        return "never came"
    return f"{max(0, round((now - moment).total_seconds()))} s before"


def run_failure_detail(exc: BaseException) -> str:
    """The one line a failed run shows: the exception's type and message."""
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
