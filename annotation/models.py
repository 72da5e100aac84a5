"""Projects, chains, steps, labels and leases.

Labels are never edited in place: a correction is a new Annotation whose
``supersedes`` points at the one it replaces (invariant 1)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Lower

from annotation.guidelines import GUIDELINES_MAX_CHARS


class LabelingMode(models.TextChoices):
    ALL_STEPS = "all_steps", "Grade every step"
    FIRST_ERROR = "first_error", "Stop at the first incorrect step"


class StepSplit(models.TextChoices):
    NEWLINE = "newline", "One step per non-empty line"
    DOUBLE_NEWLINE = "double_newline", "One step per paragraph"


class Role(models.TextChoices):
    ANNOTATOR = "annotator", "Annotator"
    LEAD = "lead", "Project lead"
    ML = "ml", "ML staff"


class ImportLabels(models.TextChoices):
    """How labels carried in by an import count toward consensus."""

    IGNORE = "ignore", "Ignore imported labels"
    VOTE = "vote", "Count each imported label as one more vote"
    FALLBACK = "fallback", "Use imported labels only on chains no person has labeled"


class ConsensusMethod(models.TextChoices):
    """How a step's votes become the label training uses (annotation/quality/consensus.py)."""

    MAJORITY = "majority", "Majority vote"
    DAWID_SKENE = "dawid_skene", "Dawid-Skene (annotator reliability learned from the labels)"


class Rating(models.IntegerChoices):
    INCORRECT = -1, "incorrect"
    AMBIGUOUS = 0, "ambiguous"
    CORRECT = 1, "correct"


class MachineSource(models.TextChoices):
    """Where a machine's step label comes from (issue 23)."""

    MONTE_CARLO = "monte_carlo", "Monte-Carlo rollouts"
    JUDGE = "judge", "Judge"
    PRM = "prm", "PRM"
    IMPORT = "import", "Import"


class PrelabelOutcome(models.TextChoices):
    """What a human rating did with the machine verdict the workspace showed on its step
    (issue 23, verification): none shown, confirmed, or overridden."""

    NONE = "none", "No machine verdict shown"
    CONFIRMED = "confirmed", "Confirmed the machine verdict"
    OVERRIDDEN = "overridden", "Overrode the machine verdict"


class ChainRouting(models.TextChoices):
    """Where the lead's routing rules sent a chain (issue 23, ``routing.services``)."""

    NONE = "", "People, as usual"
    AGREED = "agreed", "Machine-agreed: accepted without a person"
    SPOT_CHECK = "spot_check", "Machine-agreed, sent to a person as a spot check"
    DISAGREED = "disagreed", "Machine sources disagree: people first"
    SECOND_LOOK = "second_look", "The PRM contradicts a person: a second look"


def routing_sources_valid(value: Any) -> None:
    """A project's routing sources: a list of distinct machine sources."""
    if not isinstance(value, list) or any(v not in MachineSource.values for v in value):
        raise ValidationError(f"A list of machine sources, of {', '.join(MachineSource.values)}.")
    if len(set(value)) != len(value):
        raise ValidationError("Each source at most once.")


class Project(models.Model):
    name = models.CharField(max_length=200, unique=True)
    guidelines = models.TextField(
        blank=True, validators=[MaxLengthValidator(GUIDELINES_MAX_CHARS)], help_text="Markdown."
    )
    # The guidelines rendered once, when saved, for every page that shows them, and the
    # digest of the Markdown it was rendered from (projects.services).
    guidelines_html = models.TextField(blank=True, editable=False)
    guidelines_html_digest = models.CharField(max_length=64, blank=True, editable=False)
    overlap = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(50)],
        help_text="How many annotators grade each chain.",
    )
    labeling_mode = models.CharField(
        max_length=20, choices=LabelingMode.choices, default=LabelingMode.ALL_STEPS
    )
    step_split = models.CharField(
        max_length=20,
        choices=StepSplit.choices,
        default=StepSplit.NEWLINE,
        help_text="How plain-text solutions are split into steps on import.",
    )
    lease_minutes = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(24 * 60)]
    )
    show_reference_answer = models.BooleanField(default=True)
    leads_rule_own_labels = models.BooleanField(
        default=False,
        help_text="A lead may rule on a disagreement they labeled themselves (off: another "
        "lead rules, so nobody settles a dispute in their own favour).",
    )
    import_labels = models.CharField(
        max_length=20,
        choices=ImportLabels.choices,
        default=ImportLabels.FALLBACK,
        help_text="How labels that came in with an import count toward consensus.",
    )
    consensus = models.CharField(
        max_length=20,
        choices=ConsensusMethod.choices,
        default=ConsensusMethod.MAJORITY,
        help_text="How a step's votes become its label: majority vote, or Dawid-Skene, which "
        "learns each annotator's reliability from all the project's labels and its gold "
        "chains and weighs their votes by it. Snapshots use the chosen one; review shows both.",
    )
    # Gold chains and screening (annotation/quality/gold.py).
    gold_rate = models.FloatField(
        default=0.0,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Share of claims that get a gold chain while the annotator has unseen ones.",
    )
    screening_chains = models.PositiveSmallIntegerField(
        default=0,
        validators=[MaxValueValidator(1000)],
        help_text="Gold chains an annotator must pass before real work; 0: no screening.",
    )
    screening_pass_accuracy = models.FloatField(
        default=0.8,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Step accuracy on the screening chains needed to pass.",
    )
    # Verification (issue 23): the workspace shows each step's machine verdict, which the
    # annotator confirms or overrides (``annotation.labeling.queue.prelabels``).
    prelabels = models.BooleanField(
        default=False,
        help_text="Show annotators each step's machine verdict to confirm or override.",
    )
    prelabel_source = models.CharField(
        max_length=20,
        choices=MachineSource.choices,
        default=MachineSource.JUDGE,
        help_text="The machine source whose verdicts the workspace shows.",
    )
    prelabel_holdout = models.FloatField(
        default=0.1,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Share of chains served without pre-labels, to measure how much they "
        "sway annotators (fixed per chain and annotator).",
    )
    # Routing (issue 23, ``annotation.routing.services``): chains the chosen machine sources
    # agree on may be accepted without a person; chains they disagree on, and chains the
    # active PRM strongly contradicts a person on, go to people first.
    routing_sources = models.JSONField(
        default=list,
        blank=True,
        validators=[routing_sources_valid],
        help_text="The machine sources whose first errors routing compares (two or more to "
        "accept a chain).",
    )
    routing_accept = models.BooleanField(
        default=False,
        help_text="Accept chains the routing sources agree on without a person (marked "
        "machine-agreed in every export).",
    )
    routing_spot_check = models.FloatField(
        default=0.05,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="Share of machine-agreed chains still sent to a person, as a spot check.",
    )
    routing_min_kappa = models.FloatField(
        default=0.6,
        validators=[MinValueValidator(-1.0), MaxValueValidator(1.0)],
        help_text="A source whose Cohen's kappa against people's consensus is below this (or "
        "not yet measured) routes nothing.",
    )
    routing_second_look = models.FloatField(
        default=0.0,
        validators=[MinValueValidator(0.0), MaxValueValidator(1.0)],
        help_text="A person's label the active PRM contradicts with at least this confidence "
        "(P(correct) of a step rated wrong, or of not-correct of a step rated correct) gets "
        "a second look by another annotator; 0: off.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    # The progress annotators see, frozen once a day (annotation.projects.selectors,
    # ``progress_as_annotators_see_it``): {"day": ISO date, "chains_total": ...}.
    annotator_progress = models.JSONField(default=dict, blank=True, editable=False)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(gold_rate__gte=0.0, gold_rate__lte=1.0), name="project_gold_rate_range"
            ),
            models.CheckConstraint(
                condition=Q(screening_pass_accuracy__gte=0.0, screening_pass_accuracy__lte=1.0),
                name="project_screening_accuracy_range",
            ),
            models.CheckConstraint(condition=Q(overlap__gte=1), name="project_overlap_positive"),
            models.CheckConstraint(
                condition=Q(lease_minutes__gte=1), name="project_lease_positive"
            ),
            models.CheckConstraint(
                condition=Q(labeling_mode__in=LabelingMode.values),
                name="project_labeling_mode_valid",
            ),
            models.CheckConstraint(
                condition=Q(consensus__in=ConsensusMethod.values),
                name="project_consensus_valid",
            ),
            models.CheckConstraint(
                condition=Q(prelabel_holdout__gte=0.0, prelabel_holdout__lte=1.0),
                name="project_prelabel_holdout_range",
            ),
            models.CheckConstraint(
                condition=Q(prelabel_source__in=MachineSource.values),
                name="project_prelabel_source_valid",
            ),
            models.CheckConstraint(
                condition=Q(routing_spot_check__gte=0.0, routing_spot_check__lte=1.0),
                name="project_routing_spot_check_range",
            ),
            models.CheckConstraint(
                condition=Q(routing_min_kappa__gte=-1.0, routing_min_kappa__lte=1.0),
                name="project_routing_min_kappa_range",
            ),
            models.CheckConstraint(
                condition=Q(routing_second_look__gte=0.0, routing_second_look__lte=1.0),
                name="project_routing_second_look_range",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def lease_duration(self) -> timedelta:
        return timedelta(minutes=self.lease_minutes)


class Membership(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.ANNOTATOR)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "user"], name="membership_unique"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="membership_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.project} as {self.role}"


class InviteState(models.TextChoices):
    """Where an invitation stands (``annotation.projects.invite_reads.invite_state``): only a
    pending one lets anyone in."""

    PENDING = "pending", "Pending"
    EXPIRED = "expired", "Expired"
    ACCEPTED = "accepted", "Accepted"
    REVOKED = "revoked", "Revoked"


class Invite(models.Model):
    """A one-time link that makes whoever follows it a member of ``project`` with
    ``role``, until ``expires_at``. A lead makes it for an e-mail address (a new person
    sets a username and a password; someone signed in joins with their account) or for
    an existing account (``user``: only that account may accept).

    The link carries ``<selector>-<secret>``. Only the selector, the public half that
    finds the row, and a SHA-256 hash of the secret are stored, so neither a copy of the
    database nor its logs can open an invitation; the secret is compared with the hash
    in constant time (``annotation.projects.invite_reads``). Accepted and revoked invitations
    stay, as the record of who let whom in."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="invites")
    role = models.CharField(max_length=20, choices=Role.choices)
    email = models.EmailField(max_length=254, blank=True)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="+",
        help_text="The account this invitation is for, when it was made by username.",
    )
    name = models.CharField(max_length=150, blank=True)
    selector = models.CharField(max_length=16, unique=True)
    token_hash = models.CharField(max_length=64)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(role__in=Role.values), name="invite_role_valid"),
            # For an address or for an account, never both and never nobody.
            models.CheckConstraint(
                condition=(Q(email="") & Q(user__isnull=False))
                | (~Q(email="") & Q(user__isnull=True)),
                name="invite_for_address_or_account",
            ),
            models.CheckConstraint(
                condition=Q(accepted_at__isnull=True) | Q(revoked_at__isnull=True),
                name="invite_accepted_or_revoked",
            ),
            # One open invitation a person and project: a second link for the same
            # person would be a second way in that the lead cannot see is the same.
            models.UniqueConstraint(
                "project",
                Lower("email"),
                condition=Q(accepted_at__isnull=True, revoked_at__isnull=True) & ~Q(email=""),
                name="invite_open_email_unique",
            ),
            models.UniqueConstraint(
                fields=["project", "user"],
                condition=Q(accepted_at__isnull=True, revoked_at__isnull=True),
                name="invite_open_user_unique",
            ),
        ]

    def __str__(self) -> str:
        return f"invitation to {self.project} as {self.role}"


class ImportBatch(models.Model):
    """One imported file. Its content hash makes a repeated import a no-op."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="imports")
    filename = models.CharField(max_length=500)
    format = models.CharField(max_length=30)
    content_hash = models.CharField(max_length=64)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    chains_created = models.PositiveIntegerField(default=0)
    chains_duplicate = models.PositiveIntegerField(default=0)
    steps_created = models.PositiveIntegerField(default=0)
    labels_created = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "content_hash"], name="import_batch_unique_file"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.filename} ({self.format})"


class EvaluationSet(models.Model):
    """Chains a lead set apart to measure model versions on (``datasets.evaluation_sets``):
    an import's chains, or chains the lead named (a labeled part of the project), marked
    after they carry labels (an import's, or human passes made before). Its chains are
    never trained on and never leased; every model version of the project is scored on it
    (``prm_training``'s ``EvaluationResult``). A chain belongs to one set at most
    (``Chain.evaluation_set``); unmarking a set returns its chains to ordinary work and
    drops the results measured on it."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="evaluation_sets")
    name = models.CharField(max_length=200)
    import_batch = models.ForeignKey(
        ImportBatch,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="evaluation_sets",
        help_text="The import whose chains it holds; empty for chains a lead named.",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["import_batch"], name="evaluation_set_one_per_import"),
            models.UniqueConstraint(fields=["project", "name"], name="evaluation_set_unique_name"),
        ]

    def __str__(self) -> str:
        return f"evaluation set {self.name}"


class ImportJobStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"


class ImportJob(models.Model):
    """One uploaded file waiting for, going through, or done with its import (a Celery
    task, ``datasets.import_jobs``). The upload is kept under STEPLAB_IMPORT_DIR at
    ``stored_name`` until the job finishes. ``records_read`` and ``bytes_read`` move while
    it runs; a finished job holds either ``result`` (the counts) or the bad lines in
    ``errors`` (the first ``datasets.imports.MAX_KEPT_ERRORS``; ``error_count`` all of
    them) and ``detail``, and then nothing of the file was written."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="import_jobs")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    filename = models.CharField(max_length=500)
    # Relative to STEPLAB_IMPORT_DIR, so web and worker may mount it at different paths.
    stored_name = models.CharField(max_length=200)
    size = models.BigIntegerField(help_text="The upload's size in bytes.")
    format_requested = models.CharField(max_length=30, default="auto")
    status = models.CharField(
        max_length=10, choices=ImportJobStatus.choices, default=ImportJobStatus.QUEUED
    )
    records_read = models.BigIntegerField(default=0)
    bytes_read = models.BigIntegerField(default=0)
    result = models.JSONField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)
    error_count = models.PositiveIntegerField(default=0)
    detail = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["project", "-id"], name="import_job_by_project")]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=ImportJobStatus.values), name="import_job_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"import job {self.pk}: {self.filename} ({self.status})"


class Problem(models.Model):
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="problems")
    text = models.TextField()
    reference_answer = models.TextField(blank=True)
    content_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "content_hash"], name="problem_unique_text"),
        ]

    def __str__(self) -> str:
        return self.text[:80]


class Chain(models.Model):
    """One sampled solution. ``finished_count`` counts finished human annotations;
    ``is_finished`` is kept equal to ``finished_count >= project.overlap + extra_labels``
    by the services so the queue can use a partial index instead of counting.

    Every counted submit updates the row's ``finished_count``, which indexes read, so the
    update inserts into every index whose condition holds: an index here costs each
    submit, and none repeats another's leading column (BENCHMARKS.md, the queue under
    concurrency)."""

    # No index of its own: ``chain_by_project`` (project, id) serves lookups by project.
    project = models.ForeignKey(
        Project, on_delete=models.CASCADE, related_name="chains", db_index=False
    )
    problem = models.ForeignKey(Problem, on_delete=models.CASCADE, related_name="chains")
    import_batch = models.ForeignKey(
        ImportBatch, null=True, blank=True, on_delete=models.SET_NULL, related_name="chains"
    )
    content_hash = models.CharField(max_length=64)
    final_answer = models.TextField(blank=True)
    generator = models.CharField(max_length=200, blank=True)
    meta = models.JSONField(default=dict, blank=True)
    step_count = models.PositiveIntegerField(default=0)
    priority = models.FloatField(default=0.0)
    finished_count = models.PositiveIntegerField(default=0)
    is_finished = models.BooleanField(default=False)
    # Flagged as broken by an annotator through a live lease (``chain_flag``): out of the
    # queue until a lead clears it (``chain_flag_clear``). The fields keep who flagged it,
    # why and when, and who cleared the last flag and when; a new flag replaces the author
    # and reason (each flag also stays on its skipped lease's ``skip_reason``).
    is_flagged = models.BooleanField(default=False)
    # No index on the two authors: only deleting a user looks chains up by them, and an
    # index would cost every imported chain two more entries.
    flagged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    flag_reason = models.TextField(blank=True, default="")
    flagged_at = models.DateTimeField(null=True, blank=True)
    flag_cleared_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    flag_cleared_at = models.DateTimeField(null=True, blank=True)
    # A gold chain has known labels: ``gold_annotation`` (a lead's adjudication or an
    # import's labels) is its answer key. It stays out of the normal queue and is offered
    # to every annotator once (annotation/quality/gold.py); its annotations do not count
    # toward ``finished_count``. Never shown to annotators.
    is_gold = models.BooleanField(default=False)
    # Indexed where set only (``chain_by_gold_annotation``): most chains have none.
    gold_annotation = models.ForeignKey(
        "Annotation",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        db_index=False,
    )
    # Human passes a lead asked for beyond the project's overlap (``chain_requeue``): the
    # chain needs ``overlap + extra_labels`` finished annotations.
    extra_labels = models.PositiveSmallIntegerField(default=0, db_default=0)
    # The share of its steps that its current human passes do not rate differently; null
    # while fewer than two passes count (``finished_count < 2``). Kept by the services
    # that change those (``chains_agreement_refresh``: a counted submit, unmarking gold),
    # as ``finished_count`` is, so the data manager filters and sorts on a column: worked
    # out per row, sorting 1,000,000 chains by it read every rating (BENCHMARKS.md).
    agreement = models.FloatField(null=True, blank=True)
    # The lead who is to look at the chain (a bulk action of the data manager sets it):
    # shown and filtered on in the data manager and the review page. A plain pointer,
    # not a lease: anyone who leads the project may still act on the chain.
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    # The evaluation set the chain is held out in (``EvaluationSet``): never trained on,
    # never leased (out of the queue's index below).
    evaluation_set = models.ForeignKey(
        EvaluationSet,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="chains",
        db_index=False,
    )
    # Where routing sent the chain (``ChainRouting``, ``routing.services``). An agreed
    # chain is out of the queue; ``people_first`` puts a chain ahead of every other in
    # it (machines disagree on it, or the PRM contradicts a person's label).
    # ``routing_first_error`` is the first error the machine sources agreed on (-1: none),
    # which a spot check's human consensus is compared with.
    routing = models.CharField(
        max_length=16, choices=ChainRouting.choices, blank=True, default="", db_default=""
    )
    people_first = models.BooleanField(default=False, db_default=False)
    routing_first_error = models.SmallIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "content_hash"], name="chain_unique_content"
            ),
            models.CheckConstraint(
                condition=Q(routing__in=ChainRouting.values), name="chain_routing_valid"
            ),
            models.CheckConstraint(
                condition=Q(is_gold=False, gold_annotation__isnull=True)
                | Q(is_gold=True, gold_annotation__isnull=False),
                name="chain_gold_has_answer_key",
            ),
        ]
        indexes = [
            # The queue: people-first chains, then highest priority, then oldest, among
            # open chains (routing's machine-agreed chains are not open).
            models.Index(
                "project",
                models.F("people_first").desc(),
                models.F("priority").desc(),
                "id",
                condition=Q(is_finished=False, is_flagged=False, evaluation_set__isnull=True)
                & ~Q(routing="agreed"),
                name="chain_queue_idx",
            ),
            # The chains of an evaluation set: what training leaves out and a run scores.
            models.Index(
                fields=["evaluation_set", "id"],
                condition=Q(evaluation_set__isnull=False),
                name="chain_evaluation_idx",
            ),
            # Gold chains of a project: few, scanned at every gold claim and score.
            models.Index(
                fields=["project", "id"], condition=Q(is_gold=True), name="chain_gold_idx"
            ),
            # The data manager (chains/selectors.py) pages a project's chains by id; these
            # let a status filter read its page in order instead of walking every chain.
            models.Index(fields=["project", "id"], name="chain_by_project"),
            models.Index(
                fields=["project", "id"], condition=Q(is_flagged=True), name="chain_flagged_idx"
            ),
            models.Index(
                fields=["project", "id"], condition=Q(is_finished=True), name="chain_finished_idx"
            ),
            # Chains two or more people finished: the only ones that can be disputed.
            models.Index(
                fields=["project", "id"],
                condition=Q(finished_count__gte=2),
                name="chain_multi_labeled_idx",
            ),
            # The data manager's sorts (chains/order.py): a page reads its rows in
            # the order of (value, id), either way, from where the last page ended.
            models.Index(fields=["project", "finished_count", "id"], name="chain_by_passes"),
            models.Index(
                fields=["project", "agreement", "id"],
                condition=Q(agreement__isnull=False),
                name="chain_by_agreement",
            ),
            # A reviewer's chains, by id (the reviewer filter); and deleting a user.
            models.Index(
                fields=["reviewer", "project", "id"],
                condition=Q(reviewer__isnull=False),
                name="chain_by_reviewer",
            ),
            # The chain whose answer key an annotation is (PROTECT, on deleting one).
            models.Index(
                fields=["gold_annotation"],
                condition=Q(gold_annotation__isnull=False),
                name="chain_by_gold_annotation",
            ),
        ]

    def __str__(self) -> str:
        return f"chain {self.pk}"


class Step(models.Model):
    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField()
    text = models.TextField()

    class Meta:
        ordering = ["chain_id", "index"]
        constraints = [
            models.UniqueConstraint(fields=["chain", "index"], name="step_unique_index"),
        ]

    def __str__(self) -> str:
        return f"step {self.index} of chain {self.chain_id}"


class AssignmentStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    SUBMITTED = "submitted", "Submitted"
    SKIPPED = "skipped", "Skipped"
    EXPIRED = "expired", "Expired"


class Assignment(models.Model):
    """A lease: one annotator holds one chain until ``expires_at``. An ACTIVE row whose
    ``expires_at`` has passed no longer counts against the chain's overlap."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="assignments")
    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="assignments")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="assignments"
    )
    status = models.CharField(
        max_length=20, choices=AssignmentStatus.choices, default=AssignmentStatus.ACTIVE
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    skip_reason = models.TextField(blank=True)
    # On a closed (submitted or skipped) lease: whether its chain still waits in the queue
    # (not finished, not gold). The claim reads the annotator's closed leases on open
    # chains (index ``assignment_done_open``) to walk past the chains they did that wait
    # for others, a set bounded by the queue rather than by their history. A hint kept by
    # the services that finish, reopen and mark chains (``closed_leases_sync``): a stale
    # value costs a claim some speed, never a wrong lease, as the claim's per-chain checks
    # decide.
    chain_open = models.BooleanField(default=True, db_default=True)
    # Verification (``annotation.labeling.queue.prelabels``), fixed when the lease is taken: the
    # machine source the project pre-labeled with ('' when pre-labels were off), its latest
    # verdict per step as of then ({"step index": rating}; null when off or the source had
    # none for this chain), and whether they were shown (False: the chain was held out
    # for this annotator). The submit compares the ratings with what was shown here, so a
    # machine run landing mid-lease changes nothing, and the client is never asked.
    prelabel_source = models.CharField(max_length=20, blank=True, default="", db_default="")
    prelabels = models.JSONField(null=True, blank=True)
    prelabels_shown = models.BooleanField(default=False, db_default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["chain", "annotator"],
                condition=Q(status="active"),
                name="assignment_one_live_lease",
            ),
            models.UniqueConstraint(
                fields=["chain", "annotator"],
                condition=Q(status="submitted"),
                name="assignment_one_submit_per_annotator",
            ),
            models.CheckConstraint(
                condition=Q(status__in=AssignmentStatus.values), name="assignment_status_valid"
            ),
        ]
        indexes = [
            models.Index(
                fields=["chain", "expires_at"],
                condition=Q(status="active"),
                name="assignment_live_by_chain",
            ),
            models.Index(
                fields=["annotator", "project", "expires_at"],
                condition=Q(status="active"),
                name="assignment_live_by_annotator",
            ),
            models.Index(
                fields=["annotator", "project", "chain"],
                condition=Q(status__in=["submitted", "skipped"], chain_open=True),
                name="assignment_done_open",
            ),
            # The queue's "has this annotator done this chain" probe, one entry to read.
            # Without it PostgreSQL may AND the chain index with the annotator index,
            # which reads the annotator's whole history (when its statistics predate
            # them, as for any annotator new since the last ANALYZE).
            models.Index(
                fields=["chain", "annotator"],
                condition=Q(status__in=["submitted", "skipped"]),
                name="assignment_done_by_chain",
            ),
            # The data manager's "skipped" filter: a project's skipped chains in id order.
            models.Index(
                fields=["project", "chain"],
                condition=Q(status="skipped"),
                name="assignment_skipped_by_project",
            ),
        ]

    def __str__(self) -> str:
        return f"lease {self.pk} of chain {self.chain_id} to {self.annotator_id}"


class AnnotationSource(models.TextChoices):
    HUMAN = "human", "Annotator"
    IMPORT = "import", "Import"
    # A lead's ruling on a disputed chain (issue 5, review): it wins consensus on the
    # steps it rates. Never counted as an annotator's vote nor toward the overlap.
    ADJUDICATION = "adjudication", "Adjudication"


class Annotation(models.Model):
    """One finished pass over one chain: by a person (``annotator``), carried in by an
    import (``import_batch``, ``source_name`` such as "prm800k"), or a lead's adjudication
    (``annotator`` is the lead, ``note`` says why). Never edited: a correction is a new row
    with ``supersedes`` set; a new adjudication supersedes the chain's previous one."""

    # No index of its own: ``annotation_by_chain`` (chain, source) serves lookups by chain.
    chain = models.ForeignKey(
        Chain, on_delete=models.CASCADE, related_name="annotations", db_index=False
    )
    source = models.CharField(max_length=20, choices=AnnotationSource.choices)
    source_name = models.CharField(max_length=100, blank=True)
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="annotations",
    )
    import_batch = models.ForeignKey(
        ImportBatch, null=True, blank=True, on_delete=models.PROTECT, related_name="annotations"
    )
    assignment = models.OneToOneField(
        Assignment, null=True, blank=True, on_delete=models.PROTECT, related_name="annotation"
    )
    supersedes = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="superseded_by"
    )
    rewrite = models.TextField(blank=True, help_text="The corrected text of the first wrong step.")
    note = models.TextField(blank=True, help_text="An adjudicating lead's reasoning.")
    duration_ms = models.PositiveIntegerField(null=True, blank=True)
    request_id = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(source="human", annotator__isnull=False, import_batch__isnull=True)
                    | Q(source="import", annotator__isnull=True, import_batch__isnull=False)
                    | Q(source="adjudication", annotator__isnull=False, import_batch__isnull=True)
                ),
                name="annotation_source_consistent",
            ),
            models.UniqueConstraint(
                fields=["annotator", "request_id"],
                condition=~Q(request_id=""),
                name="annotation_unique_request",
            ),
        ]
        indexes = [
            models.Index(fields=["chain", "source"], name="annotation_by_chain"),
            # An annotator's history (labeling/history.py), newest first: one page of
            # entries read in order, however long the history.
            models.Index(
                fields=["annotator", "id"],
                condition=Q(source="human"),
                name="annotation_history",
            ),
            # The data manager's annotator filter: the chains one person labeled, by id.
            models.Index(
                fields=["annotator", "chain"],
                condition=Q(source="human"),
                name="annotation_by_annotator_chain",
            ),
        ]

    def __str__(self) -> str:
        return f"annotation {self.pk} of chain {self.chain_id}"


class StepRating(models.Model):
    # No index of its own: ``rating_one_per_step`` (annotation, step) serves every lookup
    # by annotation, and a submit writes a rating per step, each once per index.
    annotation = models.ForeignKey(
        Annotation, on_delete=models.CASCADE, related_name="ratings", db_index=False
    )
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="ratings")
    rating = models.SmallIntegerField(choices=Rating.choices)
    comment = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(
        null=True, blank=True, help_text="How long the step held the annotator's focus."
    )
    # Whether the rating confirmed or overrode the machine verdict the workspace showed on
    # the step, and whose verdict it was: decided by the submit from the lease
    # (``Assignment.prelabels``), never sent by the client.
    prelabel = models.CharField(
        max_length=12,
        choices=PrelabelOutcome.choices,
        default=PrelabelOutcome.NONE,
        db_default=PrelabelOutcome.NONE,
    )
    prelabel_source = models.CharField(max_length=20, blank=True, default="", db_default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["annotation", "step"], name="rating_one_per_step"),
            models.CheckConstraint(
                condition=Q(rating__gte=-1, rating__lte=1), name="rating_in_range"
            ),
            models.CheckConstraint(
                condition=Q(prelabel=PrelabelOutcome.NONE, prelabel_source="")
                | Q(
                    prelabel__in=[PrelabelOutcome.CONFIRMED, PrelabelOutcome.OVERRIDDEN],
                    prelabel_source__in=MachineSource.values,
                ),
                name="rating_prelabel_has_source",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.rating:+d} on step {self.step_id}"


class MachineLabel(models.Model):
    """One machine's verdict on one step: Monte-Carlo rollouts from the step's prefix, a
    judge's critique, the PRM, or a label carried in by an import. Never a human vote: it
    counts toward no overlap, no agreement figure and no consensus, and reaches a
    snapshot only when the lead includes its source (counted apart, as imported labels).

    ``rating`` is the verdict on the project's scale (+1, 0, -1), null where the source
    gives only a value; ``value`` is P(step correct) where the source gives one (the
    Monte-Carlo soft value, the PRM's probability); ``detail`` holds the source's own
    counts (rollouts and how many reached the answer, the hard value; a judge's samples
    and votes). ``run_kind`` and ``run_id`` name what wrote it (a rollout, judge or
    scoring run of the training app, an import batch): plain columns, not foreign keys,
    because this app never depends on the training app. One row per step, source and
    run, so a run that writes again (a redelivered task) changes nothing."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    chain = models.ForeignKey(Chain, on_delete=models.CASCADE, related_name="machine_labels")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="machine_labels")
    source = models.CharField(max_length=20, choices=MachineSource.choices)
    rating = models.SmallIntegerField(choices=Rating.choices, null=True, blank=True)
    value = models.FloatField(null=True, blank=True)
    confidence = models.FloatField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    model = models.CharField(max_length=200, blank=True)
    config_hash = models.CharField(
        max_length=64, blank=True, help_text="The template's or configuration's digest."
    )
    run_kind = models.CharField(max_length=20)
    run_id = models.PositiveIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["step", "source", "run_kind", "run_id"],
                name="machine_label_one_per_run",
            ),
            models.CheckConstraint(
                condition=Q(source__in=MachineSource.values), name="machine_label_source_valid"
            ),
            models.CheckConstraint(
                condition=Q(rating__isnull=True) | Q(rating__gte=-1, rating__lte=1),
                name="machine_label_rating_in_range",
            ),
            models.CheckConstraint(
                condition=Q(value__isnull=True) | Q(value__gte=0.0, value__lte=1.0),
                name="machine_label_value_is_probability",
            ),
        ]
        indexes = [
            models.Index(fields=["chain", "source"], name="machine_label_by_chain"),
            models.Index(fields=["project", "source"], name="machine_label_by_project"),
        ]

    def __str__(self) -> str:
        return f"{self.source} label on step {self.step_id}"


class ScreeningStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    PASSED = "passed", "Passed"
    FAILED = "failed", "Failed"


class Screening(models.Model):
    """An annotator's screening decision in a project (annotation/quality/gold.py).

    No row means pending since the annotator joined. The row is written when the
    annotator's screening gold chains are scored (PASSED or FAILED, frozen from then on so
    a later change of the answer key does not flip it) and when a lead resets a failed
    screening (PENDING again; only gold annotations from ``started_at`` on count)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="screenings")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="screenings"
    )
    status = models.CharField(
        max_length=10, choices=ScreeningStatus.choices, default=ScreeningStatus.PENDING
    )
    started_at = models.DateTimeField(
        null=True, blank=True, help_text="Gold annotations from here on count; null: all."
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    chains = models.PositiveIntegerField(default=0, help_text="Gold chains scored.")
    steps_compared = models.PositiveIntegerField(default=0)
    steps_correct = models.PositiveIntegerField(default=0)
    step_accuracy = models.FloatField(null=True, blank=True)
    resets = models.PositiveIntegerField(default=0)
    reset_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["project", "annotator"], name="screening_unique"),
            models.CheckConstraint(
                condition=Q(status__in=ScreeningStatus.values), name="screening_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"screening of {self.annotator_id} in {self.project_id}: {self.status}"


class SnapshotSplit(models.TextChoices):
    TRAIN = "train", "Train"
    HELDOUT = "heldout", "Held-out"


class SnapshotKind(models.TextChoices):
    """Who took a snapshot: a person (or the command line) for a dataset, or a training
    run for itself. Each kind numbers its own, so a lead's datasets read v1, v2, v3 with
    no gaps left by training runs (whose snapshots read t1, t2, ...)."""

    DATASET = "dataset", "Dataset"
    TRAINING = "training", "Training run"


# How a snapshot's version is written, per kind: "v3" for a dataset, "t3" for a training
# run's own. Pages, messages and export file names all say it this way.
SNAPSHOT_VERSION_PREFIX: dict[str, str] = {SnapshotKind.DATASET: "v", SnapshotKind.TRAINING: "t"}


class Snapshot(models.Model):
    """An immutable dataset version: the consensus label of every labeled step at one
    moment, split into train and held-out by problem, identified by its content hash.
    Rows are written once by ``snapshot_create`` and never updated."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="snapshots")
    kind = models.CharField(
        max_length=16,
        choices=SnapshotKind.choices,
        default=SnapshotKind.DATASET,
        db_default=SnapshotKind.DATASET,
        help_text="dataset: taken by a person or the command line; training: taken by a "
        "training run for itself (meta['training_run']).",
    )
    version = models.PositiveIntegerField(help_text="1, 2, 3 ... per project and kind.")
    content_hash = models.CharField(max_length=64)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    heldout_fraction = models.FloatField(default=0.2)
    seed = models.IntegerField(default=0)
    counts = models.JSONField(default=dict, blank=True)
    meta = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["project_id", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["project", "kind", "version"], name="snapshot_unique_kind_version"
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=SnapshotKind.values), name="snapshot_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.project} {self.label}"

    @property
    def label(self) -> str:
        """The version as people read it: ``v3`` for a dataset, ``t3`` for a training
        run's own snapshot (the two kinds number apart)."""
        return f"{SNAPSHOT_VERSION_PREFIX.get(self.kind, 'v')}{self.version}"

    @property
    def taken_for(self) -> str:
        """The run that took it for itself, as people read it ("training run #7",
        "evaluation run #3"), or "" for a dataset a person or a command took."""
        meta = self.meta if isinstance(self.meta, dict) else {}
        for key, name in (("training_run", "training run"), ("evaluation_run", "evaluation run")):
            if isinstance(meta.get(key), int):
                return f"{name} #{meta[key]}"
        return ""


class SnapshotChain(models.Model):
    """One chain in a snapshot. ``labels[i]`` is the consensus rating of step i (-1, 0, 1)
    or None where the step has no label (e.g. after the first error in first_error mode, or
    a step the snapshot's options left out); ``support[i]`` is the share of votes behind it."""

    snapshot = models.ForeignKey(Snapshot, on_delete=models.CASCADE, related_name="chains")
    chain = models.ForeignKey(Chain, on_delete=models.PROTECT, related_name="snapshot_rows")
    split = models.CharField(max_length=10, choices=SnapshotSplit.choices)
    labels = models.JSONField()
    support = models.JSONField(default=list)
    votes = models.JSONField(
        default=list,
        blank=True,
        help_text=(
            'The current labels behind the consensus, one entry per voter: {"by": username '
            'or "import:<source>", "source": "human"|"import"|"adjudication", "labels": [...]}.'
        ),
    )
    tied = models.JSONField(
        default=list,
        blank=True,
        help_text=(
            "Indexes of the steps whose votes tie and that keep the lowest rating, marked "
            'so (a snapshot taken with ties="mark"); empty otherwise.'
        ),
    )
    machine = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            "The machine labels of the sources the snapshot includes, the newest run's "
            'per step: {"labels_from": source or null, "sources": {source: [{"rating", '
            '"value", "hard", "confidence", "model", "config_hash", "run"} or null per '
            "step]}}. labels_from names the source the row's labels came from, on a chain "
            "no person labeled. Empty when the snapshot includes no machine source."
        ),
    )
    notes = models.JSONField(
        default=list,
        blank=True,
        help_text=(
            "What the voters behind the row wrote, one entry per voter and step: "
            '{"step", "by", "source", "rating", "rewrite"?, "comment"?} (rating: their '
            "vote on that step; rewrite: their corrected text of it). Empty when no one "
            "wrote anything (datasets.snapshot_notes)."
        ),
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["snapshot", "chain"], name="snapshot_chain_unique"),
        ]
        indexes = [models.Index(fields=["snapshot", "split", "chain"], name="snapshot_chain_split")]

    def __str__(self) -> str:
        return f"chain {self.chain_id} in {self.snapshot}"


class KnownSignIn(models.Model):
    """A username that signed in successfully from a client address, and when it last did
    (``annotation.login_lockout``). An address past its failure bound is locked only for
    usernames with no recent row here, so a guesser spraying usernames from a lab's address
    locks out none of the people who work there. Written only by successful sign-ins, so
    the table grows with real sign-ins, never with a guesser's."""

    username = models.CharField(max_length=150)
    address = models.GenericIPAddressField()
    last_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["username", "address"], name="known_sign_in_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.username} from {self.address}"


class BulkActionKind(models.TextChoices):
    """What a lead does to many chains at once from the data manager
    (``chains/bulk_actions.py``), each through the service that does it to one."""

    REQUEUE = "requeue", "Requeue for more passes"
    GOLD_MARK = "gold_mark", "Mark gold"
    GOLD_UNMARK = "gold_unmark", "Unmark gold"
    UNFLAG = "unflag", "Clear the flag"
    REVIEWER = "reviewer", "Assign a reviewer"
    EVALUATION_ADD = "evaluation_add", "Put into an evaluation set"
    EVALUATION_REMOVE = "evaluation_remove", "Take out of an evaluation set"


class BulkActionStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed (nothing changed)"


class BulkAction(models.Model):
    """A lead's action on a selection of chains (``chain_ids``) or on every chain a filter
    of the data manager matches (``filters``, as its API takes them), run by a Celery task
    in one transaction (``chains/bulk_actions.py``). ``expected`` is the count the lead
    confirmed; ``matched`` the chains the selection held when it ran, ``done`` how many of
    them were read so far (written while it runs), ``changed`` the chains the action
    changed and ``unchanged`` why the others were left (reason -> count)."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="bulk_actions")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    kind = models.CharField(max_length=20, choices=BulkActionKind.choices)
    # The action's own inputs: {"more": n} to requeue, {"reviewer": user id or null},
    # {"evaluation_set": id} to put chains into a set or take them out of it.
    params = models.JSONField(default=dict, blank=True)
    chain_ids = models.JSONField(null=True, blank=True)
    filters = models.JSONField(null=True, blank=True)
    expected = models.PositiveIntegerField(default=0)
    status = models.CharField(
        max_length=10, choices=BulkActionStatus.choices, default=BulkActionStatus.QUEUED
    )
    matched = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    changed = models.PositiveIntegerField(default=0)
    unchanged = models.JSONField(default=dict, blank=True)
    detail = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["project", "-id"], name="bulk_action_by_project")]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=BulkActionStatus.values), name="bulk_action_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(kind__in=BulkActionKind.values), name="bulk_action_kind_valid"
            ),
            # A selection or a filter, never both.
            models.CheckConstraint(
                condition=Q(chain_ids__isnull=True) ^ Q(filters__isnull=True),
                name="bulk_action_one_selection",
            ),
        ]

    def __str__(self) -> str:
        return f"bulk action {self.pk}: {self.kind} ({self.status})"


class ChainEventKind(models.TextChoices):
    """What a lead did to a chain, as its history on the chain page says it."""

    REQUEUED = "requeued", "Requeued"
    GOLD_MARKED = "gold_marked", "Marked gold"
    GOLD_UNMARKED = "gold_unmarked", "Unmarked gold"
    UNFLAGGED = "unflagged", "Flag cleared"
    REVIEWER = "reviewer", "Reviewer set"
    ROUTED = "routed", "Routed by machine labels"
    SECOND_LOOK = "second_look", "Second look: the PRM contradicts a label"
    EVALUATION_ADDED = "evaluation_added", "Put into an evaluation set"
    EVALUATION_REMOVED = "evaluation_removed", "Taken out of an evaluation set"


class ChainEvent(models.Model):
    """One thing a lead did to one chain, for its history (the chain page): written by the
    service that did it, in the same transaction, whether it was done to this chain alone
    or to many by a ``BulkAction`` (then ``bulk_action`` says which). ``detail`` holds the
    action's inputs and what it changed, e.g. {"more": 1, "needed": 3}."""

    chain = models.ForeignKey(
        Chain, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    kind = models.CharField(max_length=20, choices=ChainEventKind.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,
    )
    detail = models.JSONField(default=dict, blank=True)
    bulk_action = models.ForeignKey(
        BulkAction,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="events",
        db_index=False,
    )
    created_at = models.DateTimeField()

    class Meta:
        # A chain's history, newest first; the FK's own index would only repeat it.
        indexes = [models.Index(fields=["chain", "-id"], name="chain_event_by_chain")]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=ChainEventKind.values), name="chain_event_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} on chain {self.chain_id}"


class ConsensusFit(models.Model):
    """A project's last Dawid-Skene fit, shared by every web process and worker
    (``annotation.quality.consensus_fit.dawid_skene_fit``): the fitted arrays, and the stamp
    of the label state they were fitted on. A reader uses it only while the project's
    stamp is still the same, so a stale fit is never served as current; one row per
    project and import-labels rule, replaced by each refit."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="+")
    import_labels = models.CharField(max_length=16, choices=ImportLabels.choices)
    stamp = models.CharField(max_length=200)
    data = models.BinaryField()
    seconds = models.FloatField()
    fitted_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["project", "import_labels"], name="consensus_fit_one_per_rule"
            ),
        ]

    def __str__(self) -> str:
        return f"Dawid-Skene fit of project {self.project_id} ({self.import_labels})"


class ApiTokenScope(models.TextChoices):
    READ = "read", "Read only"
    FULL = "full", "Full access"


class ApiToken(models.Model):
    """An API token of one user, named by them, sent as ``Authorization: Token <key>``.

    Only the SHA-256 of the key is stored (``key_hash``), and its first characters
    (``prefix``) to tell tokens apart on the page: a copy of the database opens no API.
    A token works until ``expires_at`` and only while its user's password is the one it
    was issued under (``password_mark``, ``annotation.api_tokens``): a password changed
    any way at all (the page, the admin, ``changepassword``) ends every token at once,
    with no hook to forget. A read-only token may only read (GET, HEAD, OPTIONS).
    ``last_used_at`` is written at most once per ``API_TOKEN_USE_PRECISION``."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    name = models.CharField(max_length=100)
    scope = models.CharField(max_length=8, choices=ApiTokenScope.choices)
    key_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    password_mark = models.CharField(max_length=64)
    created_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["user", "created_at"], name="api_token_user_idx")]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(scope__in=["read", "full"]), name="api_token_scope_known"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"


class WebhookEvent(models.TextChoices):
    """What a project's webhooks may subscribe to (README "Webhooks" has the payloads)."""

    CHAIN_FINISHED = "chain.finished", "Chain finished"
    SNAPSHOT_CREATED = "snapshot.created", "Snapshot created"
    IMPORT_FINISHED = "import.finished", "Import finished"
    IMPORT_FAILED = "import.failed", "Import failed"
    TRAINING_RUN_FINISHED = "training_run.finished", "Training run finished"
    MODEL_VERSION_ACTIVATED = "model_version.activated", "Model version activated"
    SCORING_RUN_FINISHED = "scoring_run.finished", "Scoring run finished"


# A lead's "send test event": sent to one webhook whatever it subscribes to.
WEBHOOK_TEST_EVENT = "webhook.test"


class Webhook(models.Model):
    """A receiver of one project's events: an http(s) URL, the events it subscribes to and
    the secret its messages are signed with (Standard Webhooks, ``whsec_`` + base64).

    The secret is kept as it is, not hashed: signing needs it, so a hash would protect
    nothing the signing worker does not already hold. Leads may read it back on the
    webhook's page and API (the people who may read it are those who may change where
    the events go anyway), and rotate it."""

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="webhooks")
    url = models.URLField(max_length=2000)
    events = models.JSONField(default=list, help_text="WebhookEvent values.")
    secret = models.CharField(max_length=100)
    description = models.CharField(max_length=200, blank=True)
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["project", "id"], name="webhook_by_project")]

    def __str__(self) -> str:
        return f"webhook {self.pk} of {self.project_id}: {self.url}"


class WebhookDeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    DELIVERED = "delivered", "Delivered"
    FAILED = "failed", "Failed"


class WebhookDelivery(models.Model):
    """One message to one webhook: the outbox row written in the transaction of the change
    it reports, and the log of its attempts (``annotation.webhooks.delivery``).

    ``message_id`` is the ``webhook-id`` header: the same for every attempt and for a
    replay, so a receiver that deduplicates by it acts once. A PENDING row is sent when
    ``next_attempt_at`` has come; a DELIVERED or FAILED one never again (a replay is a
    new row, ``replay_of`` the one it repeats)."""

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=40)
    message_id = models.CharField(max_length=40)
    payload = models.JSONField()
    status = models.CharField(
        max_length=10,
        choices=WebhookDeliveryStatus.choices,
        default=WebhookDeliveryStatus.PENDING,
    )
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    response_ms = models.PositiveIntegerField(null=True, blank=True)
    replay_of = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replays"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["webhook", "-id"], name="webhook_delivery_log"),
            # The sweep's scan: only the rows still to send.
            models.Index(
                fields=["next_attempt_at"],
                condition=Q(status="pending"),
                name="webhook_delivery_due",
            ),
            # The log's pruning: the finished rows past STEPLAB_WEBHOOK_LOG_DAYS.
            models.Index(
                fields=["created_at"],
                condition=~Q(status="pending"),
                name="webhook_delivery_finished",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["pending", "delivered", "failed"]),
                name="webhook_delivery_status_valid",
            ),
            models.CheckConstraint(
                condition=~Q(status="pending") | Q(next_attempt_at__isnull=False),
                name="webhook_delivery_pending_has_time",
            ),
        ]

    def __str__(self) -> str:
        return f"delivery {self.pk} ({self.event}, {self.status})"
