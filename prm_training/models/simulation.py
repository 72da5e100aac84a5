"""Simulation runs: paired active-learning replays of a project's labels."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from annotation.models import Project
from prm_training.models.runs import RunLifecycle, RunStatus


class SimulationSize(models.TextChoices):
    QUICK = "quick", "Quick (a smoke test: intervals resolve little)"
    FULL = "full", "Full (sized to resolve 0.02 F1 on ProcessBench)"


class SimulationRun(RunLifecycle):
    """One paired active-learning simulation on the project's newest snapshot
    (``services.simulation``), started from the ML page or the API; when it succeeds
    its result is the project's ``strategy_evidence``, what 'auto' chooses from."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="simulation_runs")
    size = models.CharField(max_length=10, choices=SimulationSize.choices)
    seeds = models.PositiveIntegerField(help_text="Seeds (splits) compared, paired.")
    rounds = models.PositiveIntegerField(help_text="Acquisition rounds per seed.")
    snapshot_version = models.PositiveIntegerField(
        null=True, blank=True, help_text="The snapshot the run replayed (its newest at the start)."
    )
    evidence = models.JSONField(
        default=dict, blank=True, help_text="What the run stored for 'auto' (strategy_evidence)."
    )

    class Meta(RunLifecycle.Meta):
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=RunStatus.values), name="simulation_run_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(size__in=SimulationSize.values), name="simulation_run_size_valid"
            ),
        ]
        indexes = [models.Index(fields=["project", "status"], name="simulation_run_by_status")]

    def __str__(self) -> str:
        return f"simulation run {self.pk} ({self.status})"
