"""Training runs, model versions and scoring runs: the PRM half of the loop.

Rows here are written only by ``prm_training.services``; nothing in ``save()`` or a signal
starts work (a saved label never trains a model by itself)."""

from __future__ import annotations

from django.conf import settings as django_settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from annotation.models import Chain, EvaluationSet, Project, Snapshot


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


class AcquisitionStrategy(models.TextChoices):
    RANDOM = "random", "Random"
    ENTROPY = "entropy", "Step uncertainty (entropy)"
    FIRST_ERROR_ENTROPY = "first_error_entropy", "Uncertainty over the first error"
    DISAGREEMENT = "disagreement", "Ensemble disagreement"
    CONVINCING_WRONG = "convincing_wrong", "Convincing wrong answer"


# The loop settings' strategy may also be 'auto': the one the evidence on the project's
# own labels supports, random until then (``services.strategy``).
AUTO_STRATEGY = "auto"
STRATEGY_SETTINGS = [
    (AUTO_STRATEGY, "Chosen from evidence (random until a strategy beats it)"),
    *AcquisitionStrategy.choices,
]


class RunTrigger(models.TextChoices):
    MANUAL = "manual", "Started by hand"
    AUTO = "auto", "Started after N finished chains"


class ProjectTrainingSettings(models.Model):
    """How the loop runs for one project. Absent means the defaults below."""

    project = models.OneToOneField(
        Project, on_delete=models.CASCADE, related_name="training_settings"
    )
    acquisition_strategy = models.CharField(
        max_length=30, choices=STRATEGY_SETTINGS, default=AUTO_STRATEGY
    )
    strategy_evidence = models.JSONField(
        default=dict,
        blank=True,
        help_text="The last paired simulation on the project's labels (a simulation run, or "
        "simulate_active_learning --project ID --save): what 'auto' chooses from.",
    )
    random_fraction = models.FloatField(
        default=0.2,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Share of the queue filled at random, a guard against a biased selector.",
    )
    retrain_every_n_finished = models.PositiveIntegerField(
        default=0, help_text="Start a training run after this many new finished chains; 0 = off."
    )
    default_config = models.JSONField(
        default=dict, blank=True, help_text="PRMConfig fields used by automatic runs."
    )
    promotion_needs_evaluation_sets = models.BooleanField(
        default=False,
        help_text="A version is made active (by hand or after its run) only when it loses on "
        "no evaluation set of the project: scored on each, and its F1 not below the "
        "strongest baseline that reads no step with the interval clear of zero.",
    )
    judge_template = models.TextField(
        blank=True,
        help_text="The prompt a judge run sends, with {problem} and {tagged_response} in it; "
        "blank: ProcessBench's critique format (ml.judge.DEFAULT_TEMPLATE).",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "project training settings"
        constraints = [
            models.CheckConstraint(
                condition=Q(random_fraction__gte=0.0, random_fraction__lte=1.0),
                name="training_settings_random_fraction_range",
            ),
            models.CheckConstraint(
                condition=Q(acquisition_strategy__in=[value for value, _ in STRATEGY_SETTINGS]),
                name="training_settings_strategy_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"training settings of {self.project}"


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
