"""Model versions' figures on the project's evaluation sets, and the runs that fill the
figures a set lacks."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from annotation.models import EvaluationSet, Project, Snapshot
from prm_training.models.runs import RunLifecycle, RunStatus
from prm_training.models.training import ModelVersion


class EvaluationResult(models.Model):
    """One model version's figures on one evaluation set, measured by the training task
    after the version's run or by an evaluation run that fills a gap later
    (``services.evaluation``, ``services.evaluation_runs``): the official report with intervals
    (``ml.evaluation.evaluation_report``: per-subset F1 and their mean, AUROC, PRMScore
    where it applies, each baseline's, and the paired difference with the strongest
    baseline that reads no step), what windows still cut, and whether it loses there."""

    model_version = models.ForeignKey(
        ModelVersion, on_delete=models.CASCADE, related_name="evaluation_results"
    )
    evaluation_set = models.ForeignKey(
        EvaluationSet, on_delete=models.CASCADE, related_name="results"
    )
    chains = models.PositiveIntegerField(default=0, help_text="Chains of the set scored.")
    unlabeled_chains = models.PositiveIntegerField(
        default=0, help_text="Chains of the set with no label in the run's snapshot: not scored."
    )
    report = models.JSONField(default=dict, blank=True)
    truncation = models.JSONField(
        default=dict, blank=True, help_text="What windows of max_length cut (ml.score)."
    )
    loses = models.BooleanField(
        null=True,
        help_text="F1 below the strongest baseline's with the paired interval under zero; "
        "null when undefined (no labeled chain, or no baseline kept).",
    )
    snapshot = models.ForeignKey(
        Snapshot,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The labels it was measured with; empty for figures stored before it was kept.",
    )
    created_at = models.DateTimeField(auto_now_add=True, help_text="When it was measured.")

    class Meta:
        ordering = ["evaluation_set_id", "-model_version_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["model_version", "evaluation_set"], name="evaluation_result_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model_version} on {self.evaluation_set}"


class EvaluationTrigger(models.TextChoices):
    SETS_CHANGED = "sets_changed", "An evaluation set was marked or its chains changed"
    VERSION = "version", "A version was made"
    MANUAL = "manual", "Asked for by ML staff"
    LABELS_CHANGED = "labels_changed", "The labels of an evaluation set's chains changed"


class EvaluationRun(RunLifecycle):
    """Fills the figures the project's evaluation sets lack (``services.evaluation_runs``):
    every model version scored on every set that holds none of its figures, a set marked
    after the version was made or one whose figures were dropped when its chains changed.
    Queued by what leaves such a gap; one waits per project at most, since a queued run
    reads the sets when it starts and so covers every change made before."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="evaluation_runs")
    trigger = models.CharField(max_length=20, choices=EvaluationTrigger.choices)
    snapshot = models.ForeignKey(
        Snapshot,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The labels it scored with: those of the newest version's snapshot.",
    )
    filled = models.PositiveIntegerField(default=0, help_text="Figures written (version, set).")
    skipped = models.JSONField(
        default=list,
        blank=True,
        help_text="Versions it could not measure: [{model_version, version, reason}].",
    )

    class Meta(RunLifecycle.Meta):
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=RunStatus.values), name="evaluation_run_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(trigger__in=EvaluationTrigger.values),
                name="evaluation_run_trigger_valid",
            ),
            models.UniqueConstraint(
                fields=["project"],
                condition=Q(status=RunStatus.QUEUED),
                name="evaluation_run_one_queued",
            ),
        ]
        indexes = [models.Index(fields=["project", "status"], name="evaluation_run_by_status")]

    def __str__(self) -> str:
        return f"evaluation run {self.pk} ({self.status})"
