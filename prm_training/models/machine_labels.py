"""Machine-label runs (sampling, rollouts, a judge) and a judge's samples."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from annotation.models import Chain, Project
from prm_training.models.runs import RunLifecycle, RunStatus


class MachineLabelRunKind(models.TextChoices):
    SAMPLE = "sample", "Sample chains from problems"
    ROLLOUT = "rollout", "Monte-Carlo rollouts"
    JUDGE = "judge", "Judge"


class MachineLabelRun(RunLifecycle):
    """One run of a causal LM from the backbone root on the GPU node (issue 23,
    ``services.machine_labels``): ``sample`` draws chains for problems and imports them,
    ``rollout`` values each step of chosen chains by Monte-Carlo rollouts from its prefix,
    ``judge`` asks the model for each chain's earliest wrong step. ``item_ids`` are the
    problems (sample) or chains (rollout, judge) the run works through, fixed when it
    starts from ``selection`` (what was asked: ids or a filter), so a retry or a resumed
    attempt works on the same items."""

    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="machine_label_runs"
    )
    kind = models.CharField(max_length=20, choices=MachineLabelRunKind.choices)
    model_name = models.CharField(
        max_length=200, help_text="A causal LM's directory under the backbone root, by name."
    )
    params = models.JSONField(
        default=dict,
        blank=True,
        help_text="SamplingParams fields (n: chains per problem, rollouts per step or judge "
        "samples per chain), and mode (rollout: full or search) or template (judge).",
    )
    selection = models.JSONField(
        default=dict, blank=True, help_text="What was asked: ids, or a filter by name."
    )
    item_ids = models.JSONField(
        default=list, blank=True, help_text="The problems or chains the selection named."
    )
    items_total = models.PositiveIntegerField(default=0)
    items_done = models.PositiveIntegerField(default=0)
    completions = models.PositiveIntegerField(default=0, help_text="Completions generated.")
    tokens = models.BigIntegerField(default=0, help_text="Tokens generated.")
    result = models.JSONField(
        default=dict,
        blank=True,
        help_text="What the run wrote: chains imported and duplicates (sample), labels "
        "written, judge answers that could not be parsed.",
    )

    class Meta(RunLifecycle.Meta):
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=RunStatus.values), name="machine_label_run_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=MachineLabelRunKind.values),
                name="machine_label_run_kind_valid",
            ),
        ]
        indexes = [models.Index(fields=["project", "status"], name="machine_label_run_by_status")]

    def __str__(self) -> str:
        return f"{self.kind} run {self.pk} ({self.status})"


class JudgeSample(models.Model):
    """One sampled critique of one chain in a judge run: the model's raw text and the step
    it names as the earliest wrong one (0-based; -1: no step is wrong), null when the text
    could not be parsed. An unparsed sample is kept here, never turned into a label; the
    chain's machine labels come from the majority of the parsed ones."""

    run = models.ForeignKey(MachineLabelRun, on_delete=models.CASCADE, related_name="judge_samples")
    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="+")
    sample_index = models.PositiveIntegerField()
    text = models.TextField()
    verdict = models.IntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["run", "chain", "sample_index"], name="judge_sample_unique"
            ),
            models.CheckConstraint(
                condition=Q(verdict__isnull=True) | Q(verdict__gte=-1),
                name="judge_sample_verdict_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"judge sample {self.sample_index} of chain {self.chain_id} in run {self.run_id}"
