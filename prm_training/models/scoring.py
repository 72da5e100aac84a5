"""Scoring runs and the scores they write per chain, which the queue's priorities and the
data manager's PRM columns read."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from annotation.models import Chain, Project
from prm_training.models.loop import AcquisitionStrategy
from prm_training.models.runs import RunLifecycle, RunStatus
from prm_training.models.training import ModelVersion


class ScoringRun(RunLifecycle):
    """Scores the project's unlabeled chains with one model version and turns the scores
    into queue priorities with ``strategy`` (mixed with ``random_fraction`` at random)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="scoring_runs")
    model_version = models.ForeignKey(
        ModelVersion, on_delete=models.PROTECT, related_name="scoring_runs"
    )
    strategy = models.CharField(max_length=30, choices=AcquisitionStrategy.choices)
    applied_strategy = models.CharField(
        max_length=30,
        choices=AcquisitionStrategy.choices,
        blank=True,
        help_text="The strategy the run used: 'random' while the version does not beat the "
        "rules that read no step (the cold-start rule), else ``strategy``.",
    )
    strategy_note = models.TextField(
        blank=True,
        help_text="Why the run applies its strategy (the 'auto' choice, the cold-start rule).",
    )
    random_fraction = models.FloatField(default=0.2)
    seed = models.IntegerField(default=0)
    chains_total = models.PositiveIntegerField(default=0)
    chains_scored = models.PositiveIntegerField(default=0)
    priorities_updated = models.PositiveIntegerField(default=0)
    truncation = models.JSONField(
        default=dict,
        blank=True,
        help_text="What windows of the version's max_length still cut from the chains scored "
        "(ml.score.truncation_counts), summed over the run.",
    )

    class Meta(RunLifecycle.Meta):
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=RunStatus.values), name="scoring_run_status_valid"
            ),
        ]
        indexes = [models.Index(fields=["project", "status"], name="scoring_run_by_status")]

    def __str__(self) -> str:
        return f"scoring run {self.pk} ({self.status})"


class ChainScore(models.Model):
    """One chain's PRM output in one scoring run. ``step_probs[i]`` is P(step i correct);
    ``member_probs`` holds each ensemble member's probabilities when there is an ensemble."""

    scoring_run = models.ForeignKey(ScoringRun, on_delete=models.CASCADE, related_name="scores")
    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="prm_scores")
    step_probs = models.JSONField()
    member_probs = models.JSONField(null=True, blank=True)
    acquisition = models.FloatField(null=True, blank=True)
    priority = models.FloatField(null=True, blank=True)
    # The chain's score (its least step probability: a chain is as sound as its weakest
    # step) and uncertainty (1 - |2p - 1| at its least sure step), written with
    # ``step_probs`` so the data manager filters and sorts on plain columns.
    chain_score = models.FloatField(null=True, blank=True)
    chain_uncertainty = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["scoring_run", "chain"], name="chain_score_unique_per_run"
            ),
        ]
        indexes = [
            # The data manager sorted by PRM score or uncertainty (prm_training/chain_scores.py):
            # a page walks the newest run's scores in order from where the last page ended.
            models.Index(
                fields=["scoring_run", "chain_score", "chain"], name="chain_score_by_score"
            ),
            models.Index(
                fields=["scoring_run", "chain_uncertainty", "chain"],
                name="chain_score_by_uncertainty",
            ),
        ]

    def __str__(self) -> str:
        return f"scores of chain {self.chain_id} in scoring run {self.scoring_run_id}"


def chain_aggregates(step_probs: list[float]) -> tuple[float | None, float | None]:
    """(score, uncertainty) of a chain from its step probabilities; (None, None) for a
    chain without steps.

    >>> chain_aggregates([0.9, 0.2, 0.6])
    (0.2, 0.8)
    """
    if not step_probs:
        return None, None
    return min(step_probs), round(max(1 - abs(2 * p - 1) for p in step_probs), 12)
