"""The training app's webhook events, sent through the annotation app's outbox
(``annotation.webhooks.events``): ``training_run.finished``, ``scoring_run.finished`` and
``model_version.activated``. Each is called inside the transaction that ends the run or
activates the version, so the message commits or rolls back with it.

Only the runs that a lead's pipeline acts on send events: training and scoring runs, not
simulations (ML staff's comparisons of strategies)."""

from __future__ import annotations

from typing import Any

from annotation.models import WebhookEvent
from annotation.webhooks.events import webhook_event_record
from prm_training.models import ModelVersion, RunLifecycle, ScoringRun, TrainingRun

ERROR_CHARS = 300


def run_finished_emit(
    run: RunLifecycle,
    *,
    status: str,
    model_version: ModelVersion | None = None,
    **fields: Any,
) -> None:
    """``training_run.finished`` or ``scoring_run.finished`` for ``run``, which just
    ended with ``status`` (``fields``: what the same update wrote). Precondition: inside
    the transaction that wrote the end."""
    error = str(fields.get("error", run.error) or "")[:ERROR_CHARS]
    if isinstance(run, TrainingRun):
        webhook_event_record(
            project_id=run.project_id,
            event=WebhookEvent.TRAINING_RUN_FINISHED,
            data={
                "training_run": run.pk,
                "status": status,
                "trigger": run.trigger,
                "snapshot": run.snapshot_id,
                "model_version": model_version.pk if model_version else None,
                "version": model_version.version if model_version else None,
                "activated": bool(model_version and model_version.is_active),
                "error": error,
            },
        )
    elif isinstance(run, ScoringRun):
        webhook_event_record(
            project_id=run.project_id,
            event=WebhookEvent.SCORING_RUN_FINISHED,
            data={
                "scoring_run": run.pk,
                "status": status,
                "model_version": run.model_version_id,
                "strategy": run.applied_strategy or run.strategy,
                "priorities_updated": fields.get("priorities_updated", run.priorities_updated),
                "error": error,
            },
        )


def model_version_activated_emit(version: ModelVersion) -> None:
    """``model_version.activated``. Precondition: inside the activating transaction."""
    webhook_event_record(
        project_id=version.project_id,
        event=WebhookEvent.MODEL_VERSION_ACTIVATED,
        data={
            "model_version": version.pk,
            "version": version.version,
            "training_run": version.training_run_id,
            "snapshot": version.snapshot_id,
            "metrics": {str(k): v for k, v in (version.metrics or {}).items()},
        },
    )
