"""How the loop runs for one project: its acquisition strategy, its share at random, when
it retrains and what promotion needs."""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q

from annotation.models import Project


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
