"""The data manager's read paths: a project's chains filtered, searched and paged by id
(keyset: each page starts after the last id of the one before, so page 20,000 costs what
page 1 does), and one chain with its leases, skips and flag.

Every filter runs in the page's one query, ordered by ``id`` on an index that starts with
``(project, id)`` (``chain_by_project`` and the partial ones in the model's Meta), so the
database reads a page's rows in order and stops at ``limit + 1``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchVectorField
from django.db import connection
from django.db.models import (
    Case,
    Count,
    Exists,
    F,
    FloatField,
    Func,
    IntegerField,
    Max,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Cast, Coalesce, Greatest, Substr
from django.utils import timezone

from annotation.models import (
    Annotation,
    AnnotationSource,
    Assignment,
    AssignmentStatus,
    Chain,
    Problem,
    Project,
    Step,
    StepRating,
)
from annotation.selectors.chain_scores import chain_step_scores, chains_with_scores


class ChainStatus:
    UNLABELED = "unlabeled"
    IN_PROGRESS = "in_progress"
    FINISHED = "finished"
    DISPUTED = "disputed"
    FLAGGED = "flagged"
    SKIPPED = "skipped"
    GOLD = "gold"

    ALL = (UNLABELED, IN_PROGRESS, FINISHED, DISPUTED, FLAGGED, SKIPPED, GOLD)


PAGE_SIZE_MAX = 200
PROBLEM_PREVIEW = 200


def _disagreeing() -> Coalesce:
    """How many steps of the chain (the outer query's row) two or more current human
    passes (not superseded by a correction) rated differently: per step, the spread of
    its current human ratings; the steps whose spread is above zero, counted."""
    spread = (
        StepRating.objects.filter(
            step=OuterRef("pk"),
            annotation__source=AnnotationSource.HUMAN,
            annotation__superseded_by__isnull=True,
        )
        .values("step")
        .annotate(spread=Max("rating") - Min("rating"))
        .values("spread")
    )
    disputed = (
        Step.objects.filter(chain=OuterRef("pk"))
        .annotate(spread=Subquery(spread, output_field=IntegerField()))
        .filter(spread__gt=0)
        .values("chain")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Coalesce(Subquery(disputed, output_field=IntegerField()), 0)


def _agreement() -> Case:
    """The share of the chain's steps nobody disputes; null while fewer than two people
    finished it. Reads the row's ``disagreeing``."""
    steps = Greatest(F("step_count"), Value(1))
    return Case(
        When(finished_count__lt=2, then=Value(None)),
        default=Value(1.0) - Cast(F("disagreeing"), FloatField()) / Cast(steps, FloatField()),
        output_field=FloatField(),
    )


@dataclass(frozen=True)
class ChainFilters:
    """What the list shows: every field optional. ``statuses`` combine with OR, every
    other field with AND. ``annotator``: a user id (chains they labeled); ``search``:
    words in the problem or a step."""

    statuses: tuple[str, ...] = ()
    annotator: int | None = None
    max_agreement: float | None = None
    min_score: float | None = None
    max_score: float | None = None
    min_uncertainty: float | None = None
    max_uncertainty: float | None = None
    search: str = ""


@dataclass(frozen=True)
class ChainRow:
    chain_id: int
    problem: str
    step_count: int
    finished_count: int
    needed: int
    status: str
    is_flagged: bool
    is_gold: bool
    skipped: bool
    leased: bool
    agreement: float | None
    priority: float
    prm_score: float | None
    prm_uncertainty: float | None
    created_at: datetime


@dataclass(frozen=True)
class ChainPage:
    rows: list[ChainRow]
    next_after: int | None  # the ``after`` of the next page; None on the last


def _live_leases() -> QuerySet[Assignment]:
    return Assignment.objects.filter(
        chain=OuterRef("pk"), status=AssignmentStatus.ACTIVE, expires_at__gt=timezone.now()
    )


def _skips() -> QuerySet[Assignment]:
    return Assignment.objects.filter(chain=OuterRef("pk"), status=AssignmentStatus.SKIPPED)


def _status_q(status: str, *, project: Project) -> Q:
    not_done = Q(is_finished=False, is_gold=False)
    if status == ChainStatus.UNLABELED:
        return not_done & Q(finished_count=0) & ~Q(Exists(_live_leases()))
    if status == ChainStatus.IN_PROGRESS:
        return not_done & (Q(finished_count__gt=0) | Q(Exists(_live_leases())))
    if status == ChainStatus.FINISHED:
        return Q(is_finished=True)
    if status == ChainStatus.DISPUTED:
        return Q(finished_count__gte=2, disagreeing__gt=0)
    if status == ChainStatus.FLAGGED:
        return Q(is_flagged=True)
    if status == ChainStatus.SKIPPED:
        skipped = Assignment.objects.filter(project=project, status=AssignmentStatus.SKIPPED)
        return Q(pk__in=skipped.values("chain_id"))
    if status == ChainStatus.GOLD:
        return Q(is_gold=True)
    raise ValueError(f"Unknown chain status {status!r}.")


class _SimpleVector(Func):
    """``to_tsvector('simple', text)``, the expression migration 0014's GIN indexes are
    built on. The configuration is written in, not sent as a parameter (as Django's
    SearchVector sends it, with a COALESCE): in a prepared statement's generic plan a
    parameter no longer matches the index's expression, and every step would be read."""

    function = "to_tsvector"
    template = "%(function)s('simple'::regconfig, %(expressions)s)"
    output_field = SearchVectorField()


class _SimpleWords(SearchQuery):
    """``plainto_tsquery('simple', words)``: the words, parsed as the index parsed the text."""

    template = "%(function)s('simple'::regconfig, %(expressions)s)"


def _search_q(*, text: str) -> Q:
    """Chains whose problem or a step has the words: PostgreSQL's full text (``simple``
    configuration, the GIN indexes of migration 0014), elsewhere a plain substring.

    Written as EXISTS of the chain's own problem and steps, not ``IN`` over every match:
    PostgreSQL plans both a hashed sub-plan (the GIN index's matches, built once: cheap
    for a rare word) and a per-chain one (the chain's steps by ``chain_id``, tested as
    the id walk reaches them: the page stops after ``limit`` matches, so a word most
    chains have costs a page, not a pass over millions of steps) and keeps the cheaper;
    BENCHMARKS.md has both at 1,000,000 chains."""
    problems: QuerySet[Any, Any]
    steps: QuerySet[Any, Any]
    if connection.vendor == "postgresql":
        words = _SimpleWords(Value(text))
        problems = Problem.objects.alias(v=_SimpleVector("text")).filter(v=words)
        steps = Step.objects.alias(v=_SimpleVector("text")).filter(v=words)
    else:
        problems = Problem.objects.filter(text__icontains=text)
        steps = Step.objects.filter(text__icontains=text)
    return Q(Exists(problems.filter(pk=OuterRef("problem_id")))) | Q(
        Exists(steps.filter(chain_id=OuterRef("pk")))
    )


def _status_of(chain: Chain) -> str:
    if chain.is_gold:
        return ChainStatus.GOLD
    if chain.is_flagged:
        return ChainStatus.FLAGGED
    if getattr(chain, "disagreeing", 0):
        return ChainStatus.DISPUTED
    if chain.is_finished:
        return ChainStatus.FINISHED
    if chain.finished_count > 0 or getattr(chain, "leased", False):
        return ChainStatus.IN_PROGRESS
    if getattr(chain, "skipped", False):
        return ChainStatus.SKIPPED
    return ChainStatus.UNLABELED


def chain_list(
    *, project: Project, filters: ChainFilters, after: int | None = None, limit: int = 50
) -> ChainPage:
    """One page of the project's chains matching ``filters``, by id, starting after the
    id ``after``. Two queries whatever ``limit`` (the PRM's newest scoring run, and the
    page with its columns: each row's agreement, live lease and skip as sub-selects)."""
    limit = max(1, min(limit, PAGE_SIZE_MAX))
    chains = Chain.objects.filter(project=project)
    if after is not None:
        chains = chains.filter(pk__gt=after)
    chains = (
        chains_with_scores(chains=chains, project_id=project.pk)
        .annotate(
            disagreeing=_disagreeing(),
            leased=Exists(_live_leases()),
            skipped=Exists(_skips()),
            preview=Substr("problem__text", 1, PROBLEM_PREVIEW),
        )
        .annotate(agreement=_agreement())
    )
    chains = _filtered(chains, project=project, filters=filters)
    page = list(
        chains.order_by("pk").only(
            "id",
            "step_count",
            "finished_count",
            "extra_labels",
            "is_finished",
            "is_flagged",
            "is_gold",
            "priority",
            "created_at",
        )[: limit + 1]
    )
    rows = [_row(chain, overlap=project.overlap) for chain in page[:limit]]
    return ChainPage(rows=rows, next_after=rows[-1].chain_id if len(page) > limit else None)


def _filtered(chains: QuerySet[Any], *, project: Project, filters: ChainFilters) -> QuerySet[Any]:
    if filters.statuses:
        either = Q()
        for status in filters.statuses:
            either |= _status_q(status, project=project)
        chains = chains.filter(either)
    if filters.annotator is not None:
        labeled = Annotation.objects.filter(
            annotator_id=filters.annotator, source=AnnotationSource.HUMAN
        ).values("chain_id")
        chains = chains.filter(pk__in=labeled)
    if filters.max_agreement is not None:
        chains = chains.filter(finished_count__gte=2, agreement__lte=filters.max_agreement + 1e-9)
    bounds = {
        "prm_score__gte": filters.min_score,
        "prm_score__lte": filters.max_score,
        "prm_uncertainty__gte": filters.min_uncertainty,
        "prm_uncertainty__lte": filters.max_uncertainty,
    }
    chains = chains.filter(**{key: value for key, value in bounds.items() if value is not None})
    if filters.search.strip():
        chains = chains.filter(_search_q(text=filters.search.strip()))
    return chains


def _row(chain: Chain, *, overlap: int) -> ChainRow:
    agreement = getattr(chain, "agreement", None)
    score = getattr(chain, "prm_score", None)
    uncertainty = getattr(chain, "prm_uncertainty", None)
    return ChainRow(
        chain_id=chain.pk,
        problem=getattr(chain, "preview", ""),
        step_count=chain.step_count,
        finished_count=chain.finished_count,
        needed=overlap + chain.extra_labels,
        status=_status_of(chain),
        is_flagged=chain.is_flagged,
        is_gold=chain.is_gold,
        skipped=bool(getattr(chain, "skipped", False)),
        leased=bool(getattr(chain, "leased", False)),
        agreement=None if agreement is None else float(agreement),
        priority=chain.priority,
        prm_score=None if score is None else float(score),
        prm_uncertainty=None if uncertainty is None else float(uncertainty),
        created_at=chain.created_at,
    )


@dataclass(frozen=True)
class LeaseRecord:
    """A lease on the chain: who, when, how it ended, and a skip's or flag's reason."""

    assignment_id: int
    annotator: str
    status: str
    created_at: datetime
    finished_at: datetime | None
    reason: str


@dataclass(frozen=True)
class ChainDetail:
    chain: Chain
    status: str
    needed: int
    leases: list[LeaseRecord]
    step_scores: list[float] | None
    steps: list[Step]


def chain_detail(*, chain: Chain) -> ChainDetail:
    """The chain's page beyond its labels (``review.chain_labels`` has those): its
    status, every lease with its skip or flag reason, its steps and the PRM's step
    scores. The chain comes with ``project``, ``problem`` and its flag's authors loaded."""
    leases = [
        LeaseRecord(
            assignment_id=lease.pk,
            annotator=lease.annotator.username,
            status=lease.status,
            created_at=lease.created_at,
            finished_at=lease.finished_at,
            reason=lease.skip_reason,
        )
        for lease in Assignment.objects.filter(chain=chain)
        .select_related("annotator")
        .order_by("created_at", "id")
    ]
    listed = (
        Chain.objects.filter(pk=chain.pk)
        .annotate(
            disagreeing=_disagreeing(),
            leased=Exists(_live_leases()),
            skipped=Exists(_skips()),
        )
        .get()
    )
    return ChainDetail(
        chain=chain,
        status=_status_of(listed),
        needed=chain.project.overlap + chain.extra_labels,
        leases=leases,
        step_scores=chain_step_scores(chain_id=chain.pk),
        steps=list(chain.steps.order_by("index")),
    )
