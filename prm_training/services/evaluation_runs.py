"""Evaluation runs: every model version of a project scored on every evaluation set of it,
so a lead comparing versions reads them all on the same chains.

A training run measures its new version on the sets that existed when it started
(``services.evaluation``). What that leaves is filled here: a set marked after a version
was made, a set whose figures were dropped because a lead changed its chains (the data
manager's bulk action), a set marked while a version trained. An evaluation run scores
each version on each set that holds no figures of it, from the version's checkpoint, on
a GPU worker, with the lifecycle every run shares (``services.runs``: outbox, claim,
heartbeat, reaper).

When one is queued (``evaluation_run_enqueue``): when a set is marked or its chains
or their labels change (the annotation app's ``evaluation_set_changed_register`` hook, in the
transaction that changed them, after the stale figures are dropped), when a version is
published and some version still lacks figures on some set, and when ML staff ask. At
most one waits per project: a queued run reads the sets when it starts, so it covers
every change committed before; a change made while one runs queues the next.

Which labels: those of the newest version's snapshot (the labels that version was
measured with), so the versions filled together are scored on the same labels; each
figure keeps its snapshot (``EvaluationResult.snapshot``), and the page says which.

Labels that change: a set's chains are never leased, but a lead may rule on one (or an
annotator revise a pass made before the set was marked). Figures measured with a
snapshot taken before the set's newest pass (``selectors.evaluation_gaps``: ``stale``)
stay shown and are measured again: the change queues a run (the annotation app's
``chain_labels_changed_register`` hook, one waiting per project as for any change), which
freezes the labels as they are now when its snapshot predates the change (the loop's
own kind, ``meta["evaluation_run"]``; a later run reuses it while nothing changed) and
replaces the stale figures. Figures stored before their snapshot was kept are left.

A set whose chains change while a run scores it: the figures it measured on the old
chains are not written (``evaluation_results_write`` compares the set's chains under the
project lock), and the run the change queued measures the new ones.

Idempotent like every run: the claim moves QUEUED -> RUNNING under a lock; figures are
written under their unique key (version, set), so a second delivery that finds nothing
missing writes nothing. Torch is imported only by what measures
(``services.evaluation.evaluation_sets_measure``), on the worker."""

from __future__ import annotations

import logging
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from annotation.models import EvaluationSet, Snapshot
from prm_training.ml.progress import Phase, RunCancelled
from prm_training.models import (
    EvaluationRun,
    EvaluationTrigger,
    ModelVersion,
    RunStatus,
)
from prm_training.selectors import evaluation_gaps, evaluation_sets_labels_changed_at
from prm_training.services.evaluation import evaluation_sets_fill
from prm_training.services.examples import loop_snapshot_create
from prm_training.services.progress import RunProgress, run_kept_alive
from prm_training.services.runs import (
    run_cancel,
    run_claim,
    run_enqueue_on_commit,
    run_failure_detail,
    run_finish,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

NOTHING_MISSING = "Every version has figures on every evaluation set of the project."
CHECKPOINT_GONE = "its checkpoint is gone"
NO_LABELS = "no version was trained on labels yet: there are none to measure with"


def evaluation_run_enqueue(
    *, project_id: int, trigger: str, user: User | None = None
) -> EvaluationRun | None:
    """The project's waiting evaluation run, queued now (sent once the transaction
    commits) unless one waits already; None when no version lacks figures on any set.

    Lock order: the waiting run's row, which a claim also locks, so a run that is being
    claimed (and may have read the sets before this change) is not taken for waiting."""
    if not evaluation_gaps(project_id=project_id):
        return None
    with transaction.atomic():
        waiting = (
            EvaluationRun.objects.select_for_update()
            .filter(project_id=project_id, status=RunStatus.QUEUED)
            .first()
        )
        if waiting is not None:
            return waiting
        try:
            with transaction.atomic():
                run = EvaluationRun.objects.create(
                    project_id=project_id,
                    trigger=trigger,
                    started_by=user if user is not None and user.is_authenticated else None,
                )
        except IntegrityError:  # another transaction queued one since (one waits at most)
            return EvaluationRun.objects.filter(
                project_id=project_id, status=RunStatus.QUEUED
            ).first()
        run_enqueue_on_commit(run)
    return run


def evaluation_run_request(*, project_id: int, user: User | None) -> EvaluationRun:
    """What ML staff ask for: the waiting evaluation run (one queued now if none waits).
    ValidationError when no version lacks figures on any set."""
    run = evaluation_run_enqueue(project_id=project_id, trigger=EvaluationTrigger.MANUAL, user=user)
    if run is None:
        raise ValidationError(NOTHING_MISSING)
    return run


def evaluation_run_cancel(*, run: EvaluationRun) -> EvaluationRun:
    """A queued run is cancelled at once (a change made after it queues the next one); a
    running one stops within about a second, between two batches of steps: the figures it
    wrote stay, the pairs it had not reached stay missing for the next run. Raises
    ValidationError once it has finished (``services.runs.run_cancel``)."""
    return run_cancel(run)


def evaluation_set_labels_changed(*, project_id: int, evaluation_set_ids: Any) -> None:
    """The annotation app's hook (``chain_labels_changed_register``): a chain of a set got
    new labels (a ruling, a revision), so every version's figures there rest on older
    ones. They stay shown until a run measures them again on the new labels; one run is
    queued for it, at most one waiting per project as for any change."""
    evaluation_run_enqueue(project_id=project_id, trigger=EvaluationTrigger.LABELS_CHANGED)


def evaluation_sets_changed(*, project_id: int, evaluation_set_ids: Any) -> None:
    """The annotation app's hook (``evaluation_set_changed_register``): sets were marked
    or their chains changed; their stale figures are dropped by the hook registered
    before this one, and the versions are measured there again."""
    evaluation_run_enqueue(project_id=project_id, trigger=EvaluationTrigger.SETS_CHANGED)


# --- execute (worker side) ---------------------------------------------------------------


def evaluation_run_execute(
    *, run_id: int, task_id: str = "", worker: str = ""
) -> EvaluationRun | None:
    """Fill the project's missing figures. Called by the ``prm_training.evaluate`` task;
    safe to call again for the same run (module docstring). Returns the run as it ended,
    or None when this call had nothing to do."""
    run = run_claim(
        EvaluationRun, run_id, task_id=task_id, worker=worker, reset={"filled": 0, "skipped": []}
    )
    if run is None:
        return None
    try:
        with run_kept_alive(run):
            _fill(run)
    except RunCancelled:
        run_finish(run, status=RunStatus.CANCELLED)
    except ValidationError as exc:
        run_finish(run, status=RunStatus.FAILED, error="; ".join(exc.messages))
    except Exception as exc:  # noqa: BLE001 - any failure ends the run; figures written stay
        logger.exception("Evaluation run %s failed", run.pk)
        run_finish(run, status=RunStatus.FAILED, error=run_failure_detail(exc))
    run.refresh_from_db()
    return run


def _labels(run: EvaluationRun) -> Snapshot | None:
    """The labels a run measures with: the newest version's snapshot (module docstring),
    or a newer one an evaluation run froze; frozen afresh (a training-kind snapshot of the
    loop's options, ``evaluation_run`` in its meta) when an evaluation set's labels
    changed after it, so figures on stale labels are measured on the new ones."""
    newest = (
        ModelVersion.objects.filter(project_id=run.project_id, snapshot__isnull=False)
        .select_related("snapshot")
        .order_by("-version")
        .first()
    )
    if newest is None or newest.snapshot is None:
        return None
    labels: Snapshot = newest.snapshot
    frozen = (
        Snapshot.objects.filter(
            project_id=run.project_id,
            meta__has_key="evaluation_run",
            created_at__gt=labels.created_at,
        )
        .order_by("-created_at")
        .first()
    )
    labels = frozen or labels
    sets = EvaluationSet.objects.filter(project_id=run.project_id).values_list("pk", flat=True)
    changed = evaluation_sets_labels_changed_at(evaluation_set_ids=sets).values()
    if changed and max(changed) > labels.created_at:
        labels = loop_snapshot_create(project=run.project, user=None, evaluation_run=run.pk)
    return labels


def _fill(run: EvaluationRun) -> None:
    """The claimed run's work: each version that lacks figures, newest first, measured on
    the sets it lacks (``services.evaluation.evaluation_sets_fill``). A version that
    cannot be measured (its checkpoint gone or broken) is skipped with its reason; the
    others are measured all the same."""
    progress = RunProgress(run)
    progress(Phase("loading", 0, 0, detail="the versions without figures"))
    gaps = evaluation_gaps(project_id=run.project_id)
    if gaps:
        progress(Phase("snapshot", 0, 0, detail="the labels to measure with"))
    snapshot = _labels(run) if gaps else None
    EvaluationRun.objects.filter(pk=run.pk).update(snapshot=snapshot)
    lacking = sorted({(gap.version, gap.model_version_id) for gap in gaps}, reverse=True)
    stale: dict[int, set[int]] = defaultdict(set)  # version: sets whose figures it renews
    for gap in gaps:
        if gap.stale:
            stale[gap.model_version_id].add(gap.evaluation_set_id)
    filled = 0
    skipped: list[dict[str, Any]] = []
    for number, version_id in lacking:
        version = ModelVersion.objects.filter(pk=version_id).first()
        if version is None:  # deleted with its project meanwhile
            continue
        progress(Phase("loading", 0, 0, detail=f"v{number}"))
        reason = None if snapshot is not None else NO_LABELS
        if reason is None and not Path(version.checkpoint_dir).is_dir():
            reason = CHECKPOINT_GONE
        if reason is None:
            try:
                filled += evaluation_sets_fill(
                    version=version,
                    snapshot=snapshot,
                    phase=progress,
                    stale=frozenset(stale[version_id]),
                )
            except RunCancelled:
                raise
            except Exception as exc:  # noqa: BLE001 - one broken checkpoint is its version's
                logger.exception("Evaluation run %s: v%s not measured", run.pk, number)
                reason = run_failure_detail(exc)
        if reason is not None:
            skipped.append({"model_version": version_id, "version": number, "reason": reason})
        progress.note(filled=filled, skipped=skipped)
    progress(Phase("writing", 0, 0, detail="the run's outcome"))
    run_finish(run, status=RunStatus.SUCCEEDED, filled=filled, skipped=skipped)
