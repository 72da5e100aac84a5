"""Training runs and model versions: start, execute on a worker, cancel, activate, and
the auto-retrain check.

Invariant 4 lives here: a ModelVersion is written only in the transaction that marks its
run SUCCEEDED; a failed, cancelled or killed run publishes nothing and never touches the
active version.

The lifecycle a training run shares with scoring runs (outbox, claim, heartbeat, reaper,
the attempt that owns a run) is ``services.runs``.

Torch is imported only inside ``training_run_execute`` and what it calls, never at module
level: the web process imports this module to start and cancel runs."""

from __future__ import annotations

import logging
import math
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from annotation.models import (
    Chain,
    EvaluationSet,
    ImportLabels,
    Project,
    Snapshot,
    SnapshotSplit,
)
from prm_training.ml.config import run_settings
from prm_training.ml.progress import Phase, PhaseMeter, RunCancelled, step_count
from prm_training.models import (
    ModelVersion,
    ProjectTrainingSettings,
    RunStatus,
    RunTrigger,
    TrainingRun,
)
from prm_training.services.backbones import backbone_path
from prm_training.services.evaluation import (
    SetFigures,
    evaluation_results_write,
    evaluation_sets_fill,
    evaluation_sets_measure,
    model_version_promotion_refusal,
    promotion_refusal,
)
from prm_training.services.examples import snapshot_chain_examples
from prm_training.services.machine_labels import judge_template_problem
from prm_training.services.progress import RunProgress, run_kept_alive
from prm_training.services.runs import (
    AUTOSTART_TASK,
    feature_cache_dir,
    run_cancel,
    run_claim,
    run_enqueue_on_commit,
    run_failure_detail,
    run_finish,
    run_retry_check,
    task_send,
    training_attempt_dir,
)
from prm_training.services.webhooks import model_version_activated_emit, run_finished_emit

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from prm_training.ml.data import ChainExample

logger = logging.getLogger(__name__)

# The loss curve a run keeps (thinned evenly), written with its phase (progress.RunProgress).
LOSS_HISTORY_MAX = 500

# The PRMConfig fields a run may set, with their bounds, from the fields' metadata. The
# config module is torch-free; the worker builds the PRMConfig from the checked settings and
# the ML package's defaults fill in the rest.
CONFIG_FIELDS = run_settings()


@dataclass(frozen=True)
class NodeLimit:
    """The most of one training setting this node can give a run
    (``settings.STEPLAB_TRAINING_LIMITS``), and the environment variable that sets it."""

    value: int
    variable: str

    def __str__(self) -> str:
        return (
            f"Must be at most {self.value:,}: this node's limit ({self.variable}; ask an "
            "administrator to raise it if the node can give more)."
        )


def node_limits() -> dict[str, NodeLimit]:
    """The node's limit of each bounded training setting, by setting name."""
    return {
        name: NodeLimit(value=value, variable=variable)
        for name, (value, variable) in django_settings.STEPLAB_TRAINING_LIMITS.items()
    }


def training_config_clean(*, config: Mapping[str, Any], project: Project) -> dict[str, Any]:
    """``config`` with only known PRMConfig fields, each of the right type and in range,
    and a ``backbone`` that ``project``'s runs may name (``services.backbones``: a name,
    never a path). What the node gives a run (processes, batch, window, epochs,
    ensemble) is bounded by ``node_limits``, so a run asking more is refused here, naming
    the limit, before it is queued. Raises ValidationError naming every bad field."""
    errors: dict[str, list[str]] = {}
    cleaned: dict[str, Any] = {}
    for name, value in config.items():
        spec = CONFIG_FIELDS.get(name)
        if spec is None:
            errors.setdefault(name, []).append("Unknown training setting.")
            continue
        if value is None:
            continue
        if spec.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not _of_kind(value, spec.kind):
            errors.setdefault(name, []).append(f"Must be a {spec.kind.__name__}.")
            continue
        if spec.kind is float and not math.isfinite(value):
            errors.setdefault(name, []).append("Must be a finite number.")
            continue
        if spec.choices is not None and value not in spec.choices:
            errors.setdefault(name, []).append(f"Must be one of: {', '.join(spec.choices)}.")
            continue
        if spec.low is not None and value < spec.low:
            errors.setdefault(name, []).append(f"Must be at least {spec.low:g}.")
            continue
        if spec.high is not None and value > spec.high:
            errors.setdefault(name, []).append(f"Must be at most {spec.high:g}.")
            continue
        node_limit = node_limits().get(name)
        if node_limit is not None and value > node_limit.value:
            errors.setdefault(name, []).append(str(node_limit))
            continue
        if spec.max_length is not None and len(value) > spec.max_length:
            errors.setdefault(name, []).append(f"At most {spec.max_length} characters.")
            continue
        if name == "backbone":
            value = value.strip()
            try:
                backbone_path(name=value, project=project)
            except ValidationError as exc:
                errors.setdefault(name, []).extend(exc.messages)
                continue
        cleaned[name] = value
    if cleaned.get("zero_shot") and not errors:
        errors.update(_zero_shot_errors(cleaned))
    if errors:
        raise ValidationError(errors)
    return cleaned


def _zero_shot_errors(cleaned: Mapping[str, Any]) -> dict[str, list[str]]:
    """What a zero-shot run's settings lack (``PRMConfig.zero_shot``), said before it is
    queued rather than by the worker: the backbone's own step head, read in frozen_head
    mode. Whether the named backbone has a step head the worker finds out on loading it."""
    if not cleaned.get("step_prior"):
        return {"zero_shot": ["Needs step_prior: an open PRM whose model scores steps."]}
    if cleaned.get("mode") == "full":
        return {"zero_shot": ["Trains nothing: leave mode at frozen_head."]}
    return {}


LOOP_FIELDS = (
    "acquisition_strategy",
    "random_fraction",
    "retrain_every_n_finished",
    "promotion_needs_evaluation_sets",
    "judge_template",
)


def _of_kind(value: Any, kind: type) -> bool:
    """Whether ``value`` is a ``kind`` (a bool is not an int or a float here)."""
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def project_training_settings_update(
    *, project: Project, data: Mapping[str, Any]
) -> ProjectTrainingSettings:
    """Change the project's loop settings (ML staff): any of ``LOOP_FIELDS`` and
    ``default_config`` (the PRMConfig fields automatic runs use, checked like a run's
    settings and replaced whole). Fields left out keep their values. Raises
    ValidationError naming every bad field; the row is created on first change."""
    unknown = sorted(set(data) - {*LOOP_FIELDS, "default_config"})
    if unknown:
        raise ValidationError({name: "Unknown setting." for name in unknown})
    with transaction.atomic():
        loop, _ = ProjectTrainingSettings.objects.select_for_update().get_or_create(project=project)
        for name in LOOP_FIELDS:
            if name in data:
                setattr(loop, name, data[name])
        if "judge_template" in data and str(data["judge_template"]).strip():
            problem = judge_template_problem(data["judge_template"])
            if problem:
                raise ValidationError({"judge_template": problem})
        if "default_config" in data:
            config = data["default_config"] or {}
            if not isinstance(config, Mapping):
                raise ValidationError({"default_config": "Must be an object."})
            try:
                loop.default_config = training_config_clean(config=config, project=project)
            except ValidationError as exc:
                raise ValidationError(
                    {"default_config": [f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items()]}
                ) from None
        loop.full_clean(exclude=["project"])
        loop.save()
    _autostart_seen.pop(project.pk, None)
    return loop


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
    choose its readout and measure it."""
    config = training_config_clean(config=settings or {}, project=project)
    if snapshot is not None and snapshot.project_id != project.pk:
        raise ValidationError({"snapshot": "The snapshot belongs to another project."})
    with transaction.atomic():
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


class _RunReporter(RunProgress):
    """The phase report handed to ``train_prm`` (``progress.RunProgress``), with its
    ``progress`` callback (the training steps' share and the loss, written with the next
    phase write) and ``should_stop`` (the cancel flag, read once a second)."""

    def __init__(self, run: TrainingRun, *, span: float = 1.0) -> None:
        super().__init__(run)
        self.span = span
        self.losses: list[float] = []

    def progress(self, event: Any) -> None:
        loss = _progress_loss(event)
        if loss is not None and math.isfinite(loss):
            self.losses.append(float(loss))
        fraction = _progress_fraction(event)
        if fraction is not None:
            self.note(progress=min(1.0, max(0.0, self.span * float(fraction))))
        if self.losses:
            self.note(last_loss=self.losses[-1], loss_history=_thin(self.losses, LOSS_HISTORY_MAX))

    def should_stop(self) -> bool:
        return self.stop_requested()


def _thin(values: list[float], limit: int) -> list[float]:
    """At most ``limit`` values spread evenly over ``values``, keeping the last one."""
    if len(values) <= limit:
        return list(values)
    stride = len(values) / limit
    picked = [values[int(i * stride)] for i in range(limit - 1)]
    return [*picked, values[-1]]


def _progress_fraction(event: Any) -> float | None:
    fraction = getattr(event, "fraction", None)
    if fraction is not None:
        return float(fraction)
    step, total = getattr(event, "step", None), getattr(event, "total_steps", None)
    if step is not None and total:
        return float(step) / float(total)
    return None


def _progress_loss(event: Any) -> float | None:
    loss = getattr(event, "loss", None)
    return float(loss) if loss is not None else None


def run_snapshot_ensure(run: TrainingRun) -> Snapshot:
    """The run's own snapshot, taken on first use. The loop learns from every label as
    soon as it is given: unfinished chains too, an import's labels by the project's rule
    (none where the project ignores them), and tied steps at the consensus rule's lowest
    rating (a lead's dataset may choose less)."""
    if run.snapshot_id is not None:
        return run.snapshot  # type: ignore[return-value]
    from annotation.datasets.snapshots import snapshot_create

    # A snapshot that includes imports reads "ignore" as "fallback" (a lead who ticks
    # imported labels asked for them); a training run asks only where the project counts
    # them.
    snapshot = snapshot_create(
        project=run.project,
        user=run.started_by,
        finished_only=False,
        include_imported=run.project.import_labels != ImportLabels.IGNORE,
        ties="lowest",
        training_run=run.pk,
    )
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


def _beats(new: Mapping[str, float], old: Mapping[str, float]) -> bool:
    """ProcessBench F1 first, step AUROC to break a tie. A missing or NaN metric loses."""

    def key(metrics: Mapping[str, float]) -> tuple[float, float]:
        def value(name: str) -> float:
            raw = metrics.get(name)
            return float(raw) if raw is not None and math.isfinite(float(raw)) else -math.inf

        return value("processbench_f1"), value("step_auroc")

    return key(new) > key(old)


def _evaluate_version(
    *, version: ModelVersion, heldout: list[ChainExample], reporter: _RunReporter
) -> tuple[dict[str, float], dict[int, tuple[bool, bool]]]:
    """The held-out metrics of an existing version on this run's held-out chains, so the
    two versions are compared on the same chains, and its per-chain first-error hits (for
    the paired interval)."""
    from prm_training.ml.checkpoint import load_prm
    from prm_training.ml.metrics import evaluate, first_error_hits
    from prm_training.ml.score import score_chains

    meter = PhaseMeter(reporter)
    meter.start("loading", detail=f"active v{version.version}, to compare with")
    prm = load_prm(version.checkpoint_dir, cache_dir=str(feature_cache_dir()))
    meter.start(
        "comparing",
        total=step_count(heldout),
        unit="steps",
        detail=f"active v{version.version} on the same held-out chains",
    )
    scores = list(score_chains(prm, heldout, steps_done=meter.tick))
    # The version's own readout, chosen on its own training chains.
    return (
        dict(evaluate(heldout, scores, prm.readout)),
        first_error_hits(heldout, scores, prm.readout),
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
    reporter = _RunReporter(run, span=0.95)
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


def _train_and_publish(run: TrainingRun, reporter: _RunReporter) -> TrainingRun:
    """The claimed run's work: its snapshot, the training (``ml.train.train_prm``, every
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
    figures = _measure_evaluation_sets(result, snapshot, reporter, sets)
    return _publish(
        run=run,
        snapshot=snapshot,
        result=result,
        heldout=heldout,
        reporter=reporter,
        figures=figures,
    )


def _measure_evaluation_sets(
    result: Any, snapshot: Snapshot | None, reporter: _RunReporter, sets: set[int]
) -> list[SetFigures] | None:
    """The new version on every evaluation set of its project (``services.evaluation``),
    and the active version on the sets that hold no figures of it (marked after it was
    trained), so the page compares them on every set; None when the new version's
    measurement failed: it is published unmeasured, not lost."""
    try:
        figures = evaluation_sets_measure(
            checkpoint_dir=str(result.checkpoint_dir), snapshot=snapshot, phase=reporter, only=sets
        )
    except RunCancelled:
        raise
    except Exception:  # noqa: BLE001 - a failed measurement must not sink a trained version
        logger.exception("Could not measure the new version on the evaluation sets")
        return None
    if not figures or snapshot is None:
        return figures
    active = ModelVersion.objects.filter(project_id=snapshot.project_id, is_active=True).first()
    if active is not None:
        try:
            evaluation_sets_fill(version=active, snapshot=snapshot, phase=reporter)
        except RunCancelled:
            raise
        except Exception:  # noqa: BLE001 - an old checkpoint's failure is the old version's
            logger.exception("Could not measure active v%s on the evaluation sets", active.version)
    return figures


def _evaluation_gate(
    *, project_id: int, activate: bool, note: str, figures: list[SetFigures] | None
) -> tuple[bool, str]:
    """(activate, note) after the project's evaluation set rule and the new version's
    figures on each set (``services.evaluation.promotion_refusal``)."""
    if figures is None:
        note += " Its evaluation on the evaluation sets failed (see the worker's log)."
    elif figures:
        losing = [f.name for f in figures if f.loses]
        note += f" Measured on {len(figures)} evaluation set(s)" + (
            f"; below the strongest baseline on {', '.join(losing)}." if losing else "."
        )
    if not activate:
        return activate, note
    measured = {f.evaluation_set_id: f.loses for f in figures or []}
    refusal = promotion_refusal(project_id=project_id, measured=measured, version="It")
    if refusal is None:
        return activate, note
    return False, f"{note} {refusal}"


def _paired_with(
    result: Any, heldout: list[ChainExample], previous_hits: dict[int, tuple[bool, bool]]
) -> Any:
    """The new version's F1 minus the active one's on the same held-out chains, with its
    paired bootstrap interval (``metrics.paired_f1_difference``), or None."""
    from prm_training.ml.metrics import first_error_hits, paired_f1_difference

    if not result.heldout_scores:
        return None
    hits = first_error_hits(heldout, result.heldout_scores, result.readout)
    return paired_f1_difference(hits, previous_hits)


ZERO_SHOT_NOTE = "Zero-shot: the backbone's own step scores, nothing trained."


def _compare_with_active(
    *,
    project_id: int,
    snapshot: Snapshot | None,
    result: Any,
    metrics: dict[str, float],
    heldout: list[ChainExample],
    reporter: _RunReporter,
) -> tuple[ModelVersion | None, bool, str]:
    """(the active version the new one was compared with, whether the new one replaces
    it, the run's note). Both are scored on the same held-out chains; ``metrics`` gains
    the paired F1 interval and the active version's figures. A zero-shot version without
    held-out chains has nothing to be compared on: it is active only where no version is."""
    compared = ModelVersion.objects.filter(project_id=project_id, is_active=True).order_by().first()
    zero_shot = bool(metrics.get("zero_shot"))
    prefix = f"{ZERO_SHOT_NOTE} " if zero_shot else ""
    if compared is None:
        return None, True, f"{prefix}No active version: the new version is active."
    if snapshot is None or not heldout:
        return (
            compared,
            False,
            f"{prefix}No labeled held-out chains to compare it with active "
            f"v{compared.version} on: not activated (activate it by hand to score with it).",
        )
    try:
        previous, previous_hits = _evaluate_version(
            version=compared, heldout=heldout, reporter=reporter
        )
    except Exception as exc:  # noqa: BLE001 - a broken old checkpoint must not sink the run
        logger.exception("Could not evaluate active version %s", compared.pk)
        return (
            compared,
            False,
            f"Active v{compared.version} could not be evaluated ({exc}); it stays active.",
        )
    activate = _beats(metrics, previous)
    summary = (
        f"F1 {metrics.get('processbench_f1', float('nan')):.4f} vs "
        f"{previous.get('processbench_f1', float('nan')):.4f}, AUROC "
        f"{metrics.get('step_auroc', float('nan')):.4f} vs "
        f"{previous.get('step_auroc', float('nan')):.4f} on the same "
        f"{len(heldout)} held-out chains, of snapshot {snapshot.label}"
    )
    paired = _paired_with(result, heldout, previous_hits)
    if paired is not None:
        summary += f"; F1 difference {paired}"
        metrics["vs_active_f1_low"] = paired.low
        metrics["vs_active_f1_high"] = paired.high
    # An undefined metric is absent, never NaN: PostgreSQL's jsonb refuses NaN.
    for name in ("processbench_f1", "step_auroc"):
        if name in previous:
            metrics[f"active_{name}"] = float(previous[name])
    if activate:
        return (
            compared,
            True,
            f"{prefix}Beats active v{compared.version} ({summary}): made active.",
        )
    return (
        compared,
        False,
        f"{prefix}Does not beat active v{compared.version} ({summary}): not activated.",
    )


def _publish(
    *,
    run: TrainingRun,
    snapshot: Snapshot | None,
    result: Any,
    heldout: list[ChainExample],
    reporter: _RunReporter,
    figures: list[SetFigures] | None = None,
) -> TrainingRun:
    metrics = {k: float(v) for k, v in dict(result.metrics).items()}
    compared, activate, note = _compare_with_active(
        project_id=run.project_id,
        snapshot=snapshot,
        result=result,
        metrics=metrics,
        heldout=heldout,
        reporter=reporter,
    )
    activate, note = _evaluation_gate(
        project_id=run.project_id, activate=activate, note=note, figures=figures
    )
    reporter(Phase("publishing", 0, 0, detail="the new version"))
    with transaction.atomic():
        # Lock order: the run, then the project (which serializes publishes per project).
        locked = TrainingRun.objects.select_for_update().get(pk=run.pk)
        if locked.status != RunStatus.RUNNING or locked.attempts != run.attempts:
            # Reaped or taken over while this attempt trained: its result is not the run's.
            logger.warning("Training run %s lost its claim; result discarded.", run.pk)
            shutil.rmtree(Path(result.checkpoint_dir), ignore_errors=True)
            return locked
        if locked.cancel_requested:
            # Cancelled after its last progress check: it publishes nothing (invariant 4).
            shutil.rmtree(Path(result.checkpoint_dir), ignore_errors=True)
            raise RunCancelled("cancelled before publishing")
        Project.objects.select_for_update().get(pk=run.project_id)
        active = ModelVersion.objects.filter(project_id=run.project_id, is_active=True).first()
        if activate and active is not None and (compared is None or active.pk != compared.pk):
            activate = False
            note = "Another version was activated meanwhile; the new version is not active."
        number = (
            ModelVersion.objects.filter(project_id=run.project_id).aggregate(n=Max("version"))["n"]
            or 0
        ) + 1
        now = timezone.now()
        if activate and active is not None:
            # Before the insert: the partial unique index allows one active row per project.
            ModelVersion.objects.filter(pk=active.pk).update(is_active=False)
        published = ModelVersion.objects.create(
            project_id=run.project_id,
            training_run=locked,
            snapshot=snapshot,
            version=number,
            checkpoint_dir=str(result.checkpoint_dir),
            metrics=metrics,
            is_active=activate,
            activated_at=now if activate else None,
        )
        evaluation_results_write(version=published, figures=figures or [])
        locked.status = RunStatus.SUCCEEDED
        locked.finished_at = now
        locked.progress = 1.0
        locked.activation_note = note
        if reporter.losses:
            locked.last_loss = reporter.losses[-1]
            locked.loss_history = _thin(reporter.losses, LOSS_HISTORY_MAX)
        locked.save()
        run_finished_emit(locked, status=locked.status, model_version=published)
        if activate:
            model_version_activated_emit(published)
    return locked


# --- activation, auto-start --------------------------------------------------------------


def model_version_activate(*, model_version: ModelVersion, user: User | None) -> ModelVersion:
    """Make ``model_version`` the project's active version (ML staff, by hand). Idempotent.
    Raises ValidationError when the project's evaluation set rule refuses it
    (``services.evaluation.model_version_promotion_refusal``)."""
    with transaction.atomic():
        Project.objects.select_for_update().get(pk=model_version.project_id)
        version = ModelVersion.objects.get(pk=model_version.pk)
        if version.is_active:
            return version
        refusal = model_version_promotion_refusal(version=version)
        if refusal is not None:
            raise ValidationError(refusal)
        ModelVersion.objects.filter(project_id=version.project_id, is_active=True).update(
            is_active=False
        )
        version.is_active = True
        version.activated_at = timezone.now()
        version.activated_by = user if user is not None and user.is_authenticated else None
        version.save(update_fields=["is_active", "activated_at", "activated_by"])
        model_version_activated_emit(version)
    return version


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
        return training_run_start(
            project=project,
            user=None,
            settings=loop.default_config,
            trigger=RunTrigger.AUTO,
        )


def training_autostart_check_all() -> int:
    """Run the auto-retrain check of every project that retrains automatically (a
    worker does it when it reconnects to the broker: the checks sent while the broker was
    down were lost). Returns how many runs it started."""
    auto = ProjectTrainingSettings.objects.filter(retrain_every_n_finished__gt=0)
    started = 0
    for project in Project.objects.filter(pk__in=auto.values("project_id")).order_by("pk"):
        started += training_maybe_autostart(project=project) is not None
    return started


# Whether a project retrains automatically, as this process last read it: (enabled, read
# at). Most projects never do, and their submits should not pay for a broker message
# each. Another process that read "off" less than AUTOSTART_SETTING_TTL seconds before ML
# staff switched it on sends no check for the submits in that window; nothing is lost, as
# a check counts every chain finished since the last run: the first submit after the
# window starts the run those chains called for.
AUTOSTART_SETTING_TTL = 5.0
_autostart_seen: dict[int, tuple[bool, float]] = {}


def _autostart_enabled(project_id: int) -> bool:
    seen = _autostart_seen.get(project_id)
    now = time.monotonic()
    if seen is not None and now - seen[1] < AUTOSTART_SETTING_TTL:
        return seen[0]
    enabled = ProjectTrainingSettings.objects.filter(
        project_id=project_id, retrain_every_n_finished__gt=0
    ).exists()
    _autostart_seen[project_id] = (enabled, now)
    return enabled


def training_autostart_enqueue(*, project_id: int) -> None:
    """Ask a worker to run ``training_maybe_autostart`` once the current transaction
    commits, if the project retrains automatically. Cheap enough for the submit path: no
    query (but one every few seconds per project), one message when it is on; the check
    itself runs on the ``default`` queue so it never waits behind a training run."""
    if not _autostart_enabled(project_id):
        return

    def send() -> None:
        try:
            task_send(AUTOSTART_TASK, (project_id,), queue="default")
        except Exception:  # noqa: BLE001 - a broker hiccup must not fail a label submit
            logger.exception("Could not enqueue the auto-training check for %s", project_id)

    transaction.on_commit(send)
