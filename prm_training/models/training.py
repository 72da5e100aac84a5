"""Training runs and the model versions they publish (invariant 4)."""

from __future__ import annotations

from django.conf import settings as django_settings
from django.db import models
from django.db.models import Q

from annotation.models import Project, Snapshot
from prm_training.models.runs import RunLifecycle, RunStatus


class RunTrigger(models.TextChoices):
    MANUAL = "manual", "Started by hand"
    AUTO = "auto", "Started after N finished chains"


class TrainingRun(RunLifecycle):
    """One attempt to train a PRM on a snapshot. ``settings`` holds PRMConfig fields (those
    left out take the ML package's defaults). ``worker`` and ``heartbeat_at`` tell a run
    whose worker died from one still going (``services.runs.runs_reap_stale``); a retry
    is a new run with the same settings (``retry_of``)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="training_runs")
    trigger = models.CharField(max_length=20, choices=RunTrigger.choices, default=RunTrigger.MANUAL)
    settings = models.JSONField(default=dict, blank=True)
    snapshot = models.ForeignKey(
        Snapshot, null=True, blank=True, on_delete=models.PROTECT, related_name="training_runs"
    )
    progress = models.FloatField(default=0.0)
    last_loss = models.FloatField(null=True, blank=True)
    loss_history = models.JSONField(default=list, blank=True)
    finished_chains_at_start = models.PositiveIntegerField(
        default=0, help_text="Finished chains in the project when the run was queued."
    )
    activation_note = models.TextField(
        blank=True, help_text="Why the new version was, or was not, made active."
    )

    class Meta(RunLifecycle.Meta):
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=RunStatus.values), name="training_run_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(progress__gte=0.0, progress__lte=1.0),
                name="training_run_progress_range",
            ),
        ]
        indexes = [models.Index(fields=["project", "status"], name="training_run_by_status")]

    def __str__(self) -> str:
        return f"training run {self.pk} ({self.status})"


class ModelVersion(models.Model):
    """A PRM checkpoint, published only by a run that succeeded (invariant 4): trained on
    ``snapshot``, or zero-shot (``is_zero_shot``: an open PRM's own step scores, nothing
    trained), which has no snapshot when the project had no label to freeze."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="model_versions")
    training_run = models.OneToOneField(
        TrainingRun, on_delete=models.PROTECT, related_name="model_version"
    )
    snapshot = models.ForeignKey(
        Snapshot,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="model_versions",
        help_text="The labels it learned from (or, zero-shot, was measured on); empty for a "
        "zero-shot version of a project with no labels yet.",
    )
    version = models.PositiveIntegerField(help_text="1, 2, 3 ... per project.")
    checkpoint_dir = models.CharField(max_length=1000)
    metrics = models.JSONField(default=dict, blank=True)
    is_active = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    activated_by = models.ForeignKey(
        django_settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    activated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["project_id", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["project"], condition=Q(is_active=True), name="model_version_one_active"
            ),
            models.UniqueConstraint(
                fields=["project", "version"], name="model_version_unique_version"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project} model v{self.version}"

    @property
    def is_zero_shot(self) -> bool:
        """Made without training (``PRMConfig.zero_shot``): its metrics say so."""
        return bool(self.metrics.get("zero_shot"))
