"""The lifecycle every kind of run shares: its statuses and its columns
(``services.runs``: outbox, claim, heartbeat, reaper, cancel, retry)."""

from __future__ import annotations

from django.conf import settings as django_settings
from django.db import models


class RunStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


# Statuses a run never leaves.
FINISHED_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


class RunLifecycle(models.Model):
    """The columns every kind of run keeps for the lifecycle they share
    (``services.runs``: outbox, claim, heartbeat, reaper, cancel, retry). Abstract: each
    run has its own table, its own project relation and its own constraints."""

    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED)
    started_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    celery_task_id = models.CharField(max_length=255, blank=True)
    enqueued_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="When the broker took the task; empty while the broker was unreachable "
        "(the row is the outbox: a worker re-sends it when it connects).",
    )
    worker = models.CharField(max_length=255, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    phase = models.JSONField(
        default=dict,
        blank=True,
        help_text="What the run does now, how far and how fast (services.runs.RunProgress).",
    )
    retry_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="retries"
    )

    class Meta:
        abstract = True
        ordering = ["-created_at", "-id"]

    @property
    def is_finished(self) -> bool:
        return self.status in FINISHED_STATUSES
