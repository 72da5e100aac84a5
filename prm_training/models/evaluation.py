"""Model versions' figures on the project's evaluation sets."""

from __future__ import annotations

from django.db import models

from annotation.models import EvaluationSet
from prm_training.models.training import ModelVersion


class EvaluationResult(models.Model):
    """One model version's figures on one evaluation set, measured by the training task
    after the version's run (``services.evaluation``): the official report with intervals
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
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["evaluation_set_id", "-model_version_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["model_version", "evaluation_set"], name="evaluation_result_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model_version} on {self.evaluation_set}"
