"""Model versions: publishing a trained one and activating one.

Invariant 4 lives here: a ModelVersion is written only in the transaction that marks its
run SUCCEEDED (``training_run_publish``); a failed, cancelled or killed run publishes
nothing and never touches the active version. The new version replaces the active one
only when it beats it on the same held-out chains and the project's evaluation set rule
lets it; ML staff may activate any version by hand (``model_version_activate``).

Torch is imported only inside the functions that score, never at module level."""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from annotation.models import Project, Snapshot
from prm_training.ml.progress import Phase, PhaseMeter, RunCancelled, step_count
from prm_training.models import EvaluationTrigger, ModelVersion, RunStatus, TrainingRun
from prm_training.services.evaluation import (
    SetFigures,
    evaluation_results_write,
    evaluation_sets_fill,
    evaluation_sets_measure,
    model_version_promotion_refusal,
    promotion_refusal,
)
from prm_training.services.evaluation_runs import evaluation_run_enqueue
from prm_training.services.runs import feature_cache_dir
from prm_training.services.training_progress import LOSS_HISTORY_MAX, TrainingReporter, thin
from prm_training.services.webhooks import model_version_activated_emit, run_finished_emit

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from prm_training.ml.data import ChainExample


logger = logging.getLogger(__name__)


def _beats(new: Mapping[str, float], old: Mapping[str, float]) -> bool:
    """ProcessBench F1 first, step AUROC to break a tie. A missing or NaN metric loses."""

    def key(metrics: Mapping[str, float]) -> tuple[float, float]:
        def value(name: str) -> float:
            raw = metrics.get(name)
            return float(raw) if raw is not None and math.isfinite(float(raw)) else -math.inf

        return value("processbench_f1"), value("step_auroc")

    return key(new) > key(old)


def _evaluate_version(
    *, version: ModelVersion, heldout: list[ChainExample], reporter: TrainingReporter
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


def evaluation_sets_measure_new(
    result: Any, snapshot: Snapshot | None, reporter: TrainingReporter, sets: set[int]
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
    *,
    project_id: int,
    activate: bool,
    note: str,
    figures: list[SetFigures] | None,
    stored: list[SetFigures],
) -> tuple[bool, str]:
    """(activate, note) after the project's evaluation set rule and the new version's
    figures on each set (``services.evaluation.promotion_refusal``), judged on ``stored``
    only: those of ``figures`` that were written for the sets' current chains. Figures
    the write refused (a set changed after they were measured) describe chains the set
    no longer holds: the version is judged as unmeasured there, and the note says so.

    Precondition: called under the project lock, after ``evaluation_results_write``, so
    the sets it reads are those the figures were stored against."""
    if figures is None:
        note += " Its evaluation on the evaluation sets failed (see the worker's log)."
    elif stored:
        losing = [f.name for f in stored if f.loses]
        note += f" Measured on {len(stored)} evaluation set(s)" + (
            f"; below the strongest baseline on {', '.join(losing)}." if losing else "."
        )
    kept = {f.evaluation_set_id for f in stored}
    refused = sorted(f.name for f in figures or [] if f.evaluation_set_id not in kept)
    if refused:
        note += (
            f" Its figures on {', '.join(refused)} were not stored: the set's chains changed "
            "after they were measured; an evaluation run measures it there again."
        )
    if not activate:
        return activate, note
    measured = {f.evaluation_set_id: f.loses for f in stored}
    refusal = promotion_refusal(project_id=project_id, measured=measured, version="It")
    if refusal is None:
        return activate, note
    if refused:
        refusal += " Activate it by hand once it is measured there."
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
    reporter: TrainingReporter,
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


def _version_create(
    *, run: TrainingRun, snapshot: Snapshot | None, result: Any, metrics: dict[str, float]
) -> ModelVersion:
    """The run's version, numbered after the project's highest (under the project lock,
    which serializes publishes: two never take one number)."""
    number = (
        ModelVersion.objects.filter(project_id=run.project_id).aggregate(n=Max("version"))["n"] or 0
    ) + 1
    return ModelVersion.objects.create(
        project_id=run.project_id,
        training_run=run,
        snapshot=snapshot,
        version=number,
        checkpoint_dir=str(result.checkpoint_dir),
        metrics=metrics,
    )


def training_run_publish(
    *,
    run: TrainingRun,
    snapshot: Snapshot | None,
    result: Any,
    heldout: list[ChainExample],
    reporter: TrainingReporter,
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
        now = timezone.now()
        published = _version_create(run=locked, snapshot=snapshot, result=result, metrics=metrics)
        stored = evaluation_results_write(
            version=published, figures=figures or [], snapshot=snapshot
        )
        # Judged on what was stored, under the project lock: a set changed since the
        # figures were measured has none of them, and the version is not promoted on them.
        activate, note = _evaluation_gate(
            project_id=run.project_id,
            activate=activate,
            note=note,
            figures=figures,
            stored=stored,
        )
        if activate:
            # The old one first: the partial unique index allows one active row per project.
            if active is not None:
                ModelVersion.objects.filter(pk=active.pk).update(is_active=False)
            published.is_active, published.activated_at = True, now
            published.save(update_fields=["is_active", "activated_at"])
        # Sets marked while it trained, and older versions on sets marked since they were
        # made: the next evaluation run fills them.
        evaluation_run_enqueue(project_id=run.project_id, trigger=EvaluationTrigger.VERSION)
        locked.status = RunStatus.SUCCEEDED
        locked.finished_at = now
        locked.progress = 1.0
        locked.activation_note = note
        if reporter.losses:
            locked.last_loss = reporter.losses[-1]
            locked.loss_history = thin(reporter.losses, LOSS_HISTORY_MAX)
        locked.save()
        run_finished_emit(locked, status=locked.status, model_version=published)
        if activate:
            model_version_activated_emit(published)
    return locked


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
