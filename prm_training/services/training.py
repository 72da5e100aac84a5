"""Training runs: start, cancel, retry, execute on a worker, and the auto-retrain check.

What a run may set is ``services.training_settings``; what it reports while it trains,
``services.training_progress``; publishing its version (invariant 4) and activating one,
``services.model_versions``; the submit path's auto-retrain trigger, ``services.autostart``.

The lifecycle a training run shares with scoring runs (outbox, claim, heartbeat, reaper,
the attempt that owns a run) is ``services.runs``.

Torch is imported only inside ``training_run_execute`` and what it calls, never at module
level: the web process imports this module to start and cancel runs."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction

from annotation.models import Chain, EvaluationSet, Project, Snapshot, SnapshotSplit
from annotation.work_limits import TooManyWaiting
from prm_training.ml.progress import Phase, RunCancelled
from prm_training.models import ProjectTrainingSettings, RunStatus, RunTrigger, TrainingRun
from prm_training.services.backbones import backbone_path
from prm_training.services.examples import loop_snapshot_create, snapshot_chain_examples
from prm_training.services.model_versions import evaluation_sets_measure_new, training_run_publish
from prm_training.services.progress import run_kept_alive
from prm_training.services.runs import (
    feature_cache_dir,
    run_admission_check,
    run_cancel,
    run_claim,
    run_enqueue_on_commit,
    run_failure_detail,
    run_finish,
    run_retry_check,
    training_attempt_dir,
)
from prm_training.services.training_progress import TrainingReporter
from prm_training.services.training_settings import training_config_clean

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from prm_training.ml.data import ChainExample


logger = logging.getLogger(__name__)


# --- start, cancel -----------------------------------------------------------------------


def training_run_start(
    *,
    project: Project,
    user: User | None,
    settings: Mapping[str, Any] | None = None,
    snapshot: Snapshot | None = None,
    trigger: str = RunTrigger.MANUAL,
    retry_of: TrainingRun | None = None,
) -> TrainingRun:
    """Create a QUEUED run and enqueue its task once the row is committed, so a worker
    never looks for a row that was rolled back. Without ``snapshot`` the worker takes a
    fresh one of the project's consensus labels when the run starts. ``retry_of``: the
    failed or cancelled run this one retries (``training_run_retry``).

    With the ``zero_shot`` setting (and ``step_prior``) nothing trains: the version scores
    every step with the backbone's own step head (``ml.train.zero_shot_prm``), so a
    project with no labels yet can order its queue; labels, when there are any, only
    choose its readout and measure it.

    Raises ValidationError for bad settings, TooManyWaiting when the project or the node
    has its limit of training runs queued or running (``runs.run_admission_check``)."""
    config = training_config_clean(config=settings or {}, project=project)
    if snapshot is not None and snapshot.project_id != project.pk:
        raise ValidationError({"snapshot": "The snapshot belongs to another project."})
    with transaction.atomic():
        run_admission_check(TrainingRun, project_id=project.pk)
        run = TrainingRun.objects.create(
            project=project,
            settings=config,
            snapshot=snapshot,
            started_by=user if user is not None and user.is_authenticated else None,
            trigger=trigger,
            retry_of=retry_of,
            finished_chains_at_start=Chain.objects.filter(
                project=project, is_finished=True
            ).count(),
        )
        run_enqueue_on_commit(run)
    return run


def training_run_cancel(*, run: TrainingRun) -> TrainingRun:
    """A queued run is cancelled at once (its task finds it CANCELLED and returns); a
    running one is asked to stop and its worker ends it CANCELLED within about a second,
    between two batches, publishing nothing (``runs.run_cancel``)."""
    return run_cancel(run)


def training_run_retry(*, run: TrainingRun, user: User | None) -> TrainingRun:
    """A new run with the settings of ``run``, which failed (its worker lost, say) or was
    cancelled; it trains on a fresh snapshot, as any run does."""
    run_retry_check(run)
    return training_run_start(project=run.project, user=user, settings=run.settings, retry_of=run)


# --- execute (worker side) ---------------------------------------------------------------


def run_snapshot_ensure(run: TrainingRun) -> Snapshot:
    """The run's own snapshot, taken on first use (``examples.loop_snapshot_create``: the
    loop learns from every label as soon as it is given)."""
    if run.snapshot_id is not None:
        return run.snapshot  # type: ignore[return-value]
    snapshot = loop_snapshot_create(project=run.project, user=run.started_by, training_run=run.pk)
    TrainingRun.objects.filter(pk=run.pk).update(snapshot=snapshot)
    run.snapshot = snapshot
    return snapshot


def _zero_shot_snapshot(run: TrainingRun) -> Snapshot | None:
    """A zero-shot run's snapshot: the project's labels, to choose the readout and measure
    the version on when there are any; None when there is no label to freeze (the version
    then has no held-out metrics)."""
    try:
        return run_snapshot_ensure(run)
    except ValidationError:  # nothing to freeze: no chain has a label yet
        return None


def _snapshot_splits(snapshot: Snapshot | None) -> tuple[list[ChainExample], list[ChainExample]]:
    """(training chains, held-out chains) of ``snapshot``, neither holding a chain of an
    evaluation set; none without a snapshot."""
    if snapshot is None:
        return [], []
    return (
        snapshot_chain_examples(
            snapshot=snapshot, split=SnapshotSplit.TRAIN, without_evaluation=True
        ),
        snapshot_chain_examples(
            snapshot=snapshot, split=SnapshotSplit.HELDOUT, without_evaluation=True
        ),
    )


def training_run_execute(*, run_id: int, task_id: str = "", worker: str = "") -> TrainingRun | None:
    """Train the run's PRM and publish the result. Called by the ``prm_training.train``
    task; safe to call again for the same run (see the module docstring). Returns the run
    as it ended, or None when this call had nothing to do."""
    run = run_claim(
        TrainingRun,
        run_id,
        task_id=task_id,
        worker=worker,
        reset={"progress": 0.0, "loss_history": [], "last_loss": None},
    )
    if run is None:
        return None
    reporter = TrainingReporter(run, span=0.95)
    try:
        with run_kept_alive(run):
            return _train_and_publish(run, reporter)
    except RunCancelled:
        run_finish(run, status=RunStatus.CANCELLED)
    except ValidationError as exc:
        run_finish(run, status=RunStatus.FAILED, error="; ".join(exc.messages))
    except Exception as exc:  # noqa: BLE001 - any failure of the training code ends the run
        logger.exception("Training run %s failed", run.pk)
        run_finish(run, status=RunStatus.FAILED, error=run_failure_detail(exc))
    run.refresh_from_db()
    return run


def _train_and_publish(run: TrainingRun, reporter: TrainingReporter) -> TrainingRun:
    """The claimed run's work: its snapshot, the training (``ml.launch.train_prm``, every
    phase reported), the comparison with the active version and the publish."""
    from prm_training.ml.config import PRMConfig
    from prm_training.ml.launch import train_prm

    zero_shot = bool(run.settings.get("zero_shot"))
    reporter(Phase("snapshot", 0, 0, detail="freezing the project's labels"))
    snapshot = _zero_shot_snapshot(run) if zero_shot else run_snapshot_ensure(run)
    # The sets whose chains training leaves out: only they measure the version (a set
    # marked while it trains may hold chains it learned from).
    sets = set(EvaluationSet.objects.filter(project_id=run.project_id).values_list("pk", flat=True))
    train, heldout = _snapshot_splits(snapshot)
    if not zero_shot and snapshot is not None:
        if not train:
            raise ValidationError(f"Snapshot {snapshot.label} has no training chains.")
        if not heldout:
            raise ValidationError(f"Snapshot {snapshot.label} has no held-out chains.")
    # Fields left out take the ML package's defaults (the bundled MiniLM backbone).
    # The backbone is a name, resolved again here: gone since the run was queued, it
    # fails the run with the message that refused it then.
    settings = dict(run.settings)
    settings["backbone"] = backbone_path(name=settings.get("backbone", ""), project=run.project)
    settings["cache_dir"] = str(feature_cache_dir())
    config = PRMConfig.from_dict({k: v for k, v in settings.items() if v != ""})
    out_dir = training_attempt_dir(run)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    result = train_prm(
        config,
        train,
        heldout,
        out_dir,
        progress=reporter.progress,
        should_stop=reporter.should_stop,
        phase=reporter,
    )
    figures = evaluation_sets_measure_new(result, snapshot, reporter, sets)
    return training_run_publish(
        run=run,
        snapshot=snapshot,
        result=result,
        heldout=heldout,
        reporter=reporter,
        figures=figures,
    )


# --- auto-start ----------------------------------------------------------------------------


def training_maybe_autostart(*, project: Project) -> TrainingRun | None:
    """Start a run with the project's default config when ``retrain_every_n_finished`` new
    chains have finished since the last run was queued and no run is queued or running.
    Called from the ``prm_training.autostart_check`` task (never from a save or a signal);
    the settings row lock makes concurrent checks start one run at most."""
    with transaction.atomic():
        loop = ProjectTrainingSettings.objects.select_for_update().filter(project=project).first()
        if loop is None or loop.retrain_every_n_finished == 0:
            return None
        every = loop.retrain_every_n_finished
        runs = TrainingRun.objects.filter(project=project)
        if runs.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING]).exists():
            return None
        last = runs.order_by("-created_at", "-id").first()
        finished = Chain.objects.filter(project=project, is_finished=True).count()
        since = finished - (last.finished_chains_at_start if last is not None else 0)
        if since < every:
            return None
        try:
            return training_run_start(
                project=project,
                user=None,
                settings=loop.default_config,
                trigger=RunTrigger.AUTO,
            )
        except TooManyWaiting as exc:  # the node is full: a later check starts it
            logger.info("Auto-retrain of project %s waits: %s", project.pk, exc.detail)
            return None


def training_autostart_check_all() -> int:
    """Run the auto-retrain check of every project that retrains automatically (a
    worker does it when it reconnects to the broker: the checks sent while the broker was
    down were lost). Returns how many runs it started."""
    auto = ProjectTrainingSettings.objects.filter(retrain_every_n_finished__gt=0)
    started = 0
    for project in Project.objects.filter(pk__in=auto.values("project_id")).order_by("pk"):
        started += training_maybe_autostart(project=project) is not None
    return started
