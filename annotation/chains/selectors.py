"""The data manager's read paths: a project's chains filtered, searched, sorted by any
column it shows and paged by keyset (each page starts after the last row of the one
before, so page 20,000 costs what page 1 does: ``chain_order``), and one chain with its
leases, skips and flag.

Every filter runs in the page's own query, which reads its rows in the order of an index
(``chain_by_project`` and the partial ones in the model's Meta for the id order, the
others for the sorts) and stops at ``limit + 1``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchVectorField
from django.db import connection
from django.db.models import Exists, F, Func, OuterRef, Q, QuerySet, Value
from django.db.models.functions import Substr
from django.utils import timezone

from annotation.chains.order import (
    ChainCursor,
    ChainOrder,
    order_phases,
    phase_rows,
)
from annotation.chains.scores import chain_step_scores, chains_with_scores
from annotation.keyset import page_cut
from annotation.models import (
    Annotation,
    AnnotationSource,
    Assignment,
    AssignmentStatus,
    Chain,
    ChainEvent,
    ChainEventKind,
    Problem,
    Project,
    Step,
)
from annotation.routing.machine_labels import (
    machine_first_errors,
    machines_disagree,
    machines_disagree_with_people,
)


class ChainStatus:
    UNLABELED = "unlabeled"
    IN_PROGRESS = "in_progress"
    FINISHED = "finished"
    DISPUTED = "disputed"
    # A lead ruled on it (a current adjudication): it is settled, whatever its votes say.
    RESOLVED = "resolved"
    FLAGGED = "flagged"
    SKIPPED = "skipped"
    GOLD = "gold"

    # The order of the status filter's choices, and of a sort by status.
    ALL = (UNLABELED, IN_PROGRESS, FINISHED, DISPUTED, RESOLVED, FLAGGED, SKIPPED, GOLD)
    # A chain shows the first of these that holds for it (``_status_of``): a ruling
    # settles a dispute, so a ruled chain reads "resolved", never "disputed".
    PRECEDENCE = (GOLD, FLAGGED, RESOLVED, DISPUTED, FINISHED, IN_PROGRESS, SKIPPED, UNLABELED)


PAGE_SIZE_MAX = 200
PROBLEM_PREVIEW = 200


@dataclass(frozen=True)
class ChainFilters:
    """What the list shows: every field optional. ``statuses`` combine with OR, every
    other field with AND. ``annotator``: a user id (chains they labeled); ``reviewer``: a
    user id (chains they are to review); ``search``: words in the problem or a step."""

    statuses: tuple[str, ...] = ()
    annotator: int | None = None
    reviewer: int | None = None
    max_agreement: float | None = None
    min_score: float | None = None
    max_score: float | None = None
    min_uncertainty: float | None = None
    max_uncertainty: float | None = None
    search: str = ""
    # Only chains on which two machine sources name different first errors.
    machines_disagree: bool = False
    # Only chains on which a machine source and a person's pass name different ones.
    machines_vs_people: bool = False
    # Only chains routing put under one of these (``ChainRouting`` values but ""), OR.
    routings: tuple[str, ...] = ()
    # Only chains held out in an evaluation set (True) or in none (False); None: either.
    in_evaluation_set: bool | None = None


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
    reviewer: str | None
    created_at: datetime
    # Where routing sent it (``ChainRouting``; "" none): for leads, never annotators.
    routing: str = ""
    # The first error each machine source names (``machine_labels``); -1 for none.
    machine_first_errors: dict[str, int] = field(default_factory=dict)
    # The name of the evaluation set it is held out in; None when in none.
    evaluation_set: str | None = None


@dataclass(frozen=True)
class ChainPage:
    rows: list[ChainRow]
    # Where the next page starts (``ChainCursor.encode``); None on the last page.
    next_cursor: ChainCursor | None
    # In the id order, the next page's ``after`` too (the last row's id); else None.
    next_after: int | None


def _live_leases() -> QuerySet[Assignment]:
    return Assignment.objects.filter(
        chain=OuterRef("pk"), status=AssignmentStatus.ACTIVE, expires_at__gt=timezone.now()
    )


def _skips() -> QuerySet[Assignment]:
    return Assignment.objects.filter(chain=OuterRef("pk"), status=AssignmentStatus.SKIPPED)


def _ruling() -> QuerySet[Annotation]:
    """The chain's current adjudication, a probe of the (chain, source) index."""
    return Annotation.objects.filter(
        chain=OuterRef("pk"), source=AnnotationSource.ADJUDICATION, superseded_by__isnull=True
    )


def _status_q(status: str, *, project: Project) -> Q:
    """The chains for which ``status`` holds (a chain may have several: see
    ``_main_status_q``)."""
    not_done = Q(is_finished=False, is_gold=False)
    if status == ChainStatus.UNLABELED:
        return not_done & Q(finished_count=0) & ~Q(Exists(_live_leases()))
    if status == ChainStatus.IN_PROGRESS:
        return not_done & (Q(finished_count__gt=0) | Q(Exists(_live_leases())))
    if status == ChainStatus.FINISHED:
        return Q(is_finished=True)
    if status == ChainStatus.DISPUTED:
        return Q(finished_count__gte=2, agreement__lt=1.0) & ~Q(Exists(_ruling()))
    if status == ChainStatus.RESOLVED:
        return Q(Exists(_ruling()))
    if status == ChainStatus.FLAGGED:
        return Q(is_flagged=True)
    if status == ChainStatus.SKIPPED:
        skipped = Assignment.objects.filter(project=project, status=AssignmentStatus.SKIPPED)
        return Q(pk__in=skipped.values("chain_id"))
    if status == ChainStatus.GOLD:
        return Q(is_gold=True)
    raise ValueError(f"Unknown chain status {status!r}.")


def _main_status_q(status: str, *, project: Project) -> Q:
    """The chains whose shown status is ``status``: it holds and none before it in
    ``ChainStatus.PRECEDENCE`` does, as ``_status_of`` decides for a loaded row."""
    before = ChainStatus.PRECEDENCE[: ChainStatus.PRECEDENCE.index(status)]
    main = _status_q(status, project=project)
    for earlier in before:
        main &= ~_status_q(earlier, project=project)
    return main


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
    """The shown status of a row loaded with ``leased``, ``skipped`` and ``ruled`` (the
    first in ``ChainStatus.PRECEDENCE`` that holds), as ``_main_status_q`` selects it."""
    ruled = bool(getattr(chain, "ruled", False))
    holds = {
        ChainStatus.GOLD: chain.is_gold,
        ChainStatus.FLAGGED: chain.is_flagged,
        ChainStatus.RESOLVED: ruled,
        ChainStatus.DISPUTED: not ruled
        and chain.finished_count >= 2
        and chain.agreement is not None
        and chain.agreement < 1.0,
        ChainStatus.FINISHED: chain.is_finished,
        ChainStatus.IN_PROGRESS: chain.finished_count > 0 or bool(getattr(chain, "leased", False)),
        ChainStatus.SKIPPED: bool(getattr(chain, "skipped", False)),
        ChainStatus.UNLABELED: True,
    }
    return next(status for status in ChainStatus.PRECEDENCE if holds[status])


_ROW_FIELDS = (
    "id",
    "step_count",
    "finished_count",
    "extra_labels",
    "is_finished",
    "is_flagged",
    "is_gold",
    "agreement",
    "priority",
    "created_at",
    "routing",
    "evaluation_set",
)


def chain_list(
    *,
    project: Project,
    filters: ChainFilters,
    order: ChainOrder | None = None,
    cursor: ChainCursor | None = None,
    after: int | None = None,
    limit: int = 50,
) -> ChainPage:
    """One page of the project's chains matching ``filters``, in ``order`` (by id when
    None), starting after ``cursor`` (a ``next_cursor`` of the same order; in the id
    order ``after``, an id, does the same).

    A query per phase the page reaches (``chain_order``; one for the id and passes
    orders), each with the page's columns (each row's live lease and skip as
    sub-selects), plus one for the newest scoring run per phase that reads PRM scores,
    and one for the page's machine labels."""
    limit = max(1, min(limit, PAGE_SIZE_MAX))
    order = order or ChainOrder()
    if after is not None:
        if order.key != "id" or cursor is not None:
            raise ValueError("`after` pages the id order only; pass `cursor` instead.")
        cursor = ChainCursor(phase=0, value=None, chain_id=after)
    phases = chain_order_phases(project=project, order=order)

    def prepared(chains: QuerySet[Chain]) -> QuerySet[Chain]:
        chains = chains.annotate(
            leased=Exists(_live_leases()),
            skipped=Exists(_skips()),
            ruled=Exists(_ruling()),
            preview=Substr("problem__text", 1, PROBLEM_PREVIEW),
            reviewer_name=F("reviewer__username"),
            evaluation_set_name=F("evaluation_set__name"),
        ).only(*_ROW_FIELDS)
        return _filtered(chains, project=project, filters=filters)

    found = phase_rows(
        phases=phases,
        cursor=cursor,
        limit=limit,
        prepared=prepared,
        base=Chain.objects.filter(project=project),
    )
    page, last_found = page_cut(found, limit=limit)
    rows = [_row(chain, overlap=project.overlap) for _phase, chain in page]
    machine = machine_first_errors(chain_ids=[row.chain_id for row in rows])
    rows = [replace(row, machine_first_errors=machine.get(row.chain_id, {})) for row in rows]
    if last_found is None:
        return ChainPage(rows=rows, next_cursor=None, next_after=None)
    phase, last = last_found
    next_cursor = ChainCursor(phase=phase, value=phases[phase].value_of(last), chain_id=last.pk)
    return ChainPage(
        rows=rows,
        next_cursor=next_cursor,
        next_after=last.pk if order.key == "id" else None,
    )


def chains_matching(*, project: Project, filters: ChainFilters) -> QuerySet[Chain]:
    """Every chain of ``project`` that ``filters`` lets through, unordered: what a bulk
    action on a filter acts on (``chains.bulk_actions``), the list's own filters."""
    chains = chains_with_scores(chains=Chain.objects.filter(project=project), project_id=project.pk)
    return _filtered(chains, project=project, filters=filters)


def chain_order_phases(*, project: Project, order: ChainOrder) -> list[Any]:
    """The phases ``order`` reads the project's chains in (``chain_order.order_phases``),
    how many a cursor of it may name."""
    return order_phases(
        order=order,
        project_id=project.pk,
        statuses=ChainStatus.ALL,
        status_where=lambda status: _main_status_q(status, project=project),
    )


def _filtered(chains: QuerySet[Any], *, project: Project, filters: ChainFilters) -> QuerySet[Any]:
    if filters.statuses:
        either = Q()
        for status in filters.statuses:
            either |= _status_q(status, project=project)
        chains = chains.filter(either)
    if filters.reviewer is not None:
        chains = chains.filter(reviewer_id=filters.reviewer)
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
    if filters.machines_disagree:
        chains = machines_disagree(chains)
    if filters.machines_vs_people:
        chains = machines_disagree_with_people(chains)
    if filters.routings:
        chains = chains.filter(routing__in=filters.routings)
    if filters.in_evaluation_set is not None:
        chains = chains.filter(evaluation_set__isnull=not filters.in_evaluation_set)
    return chains


def _row(chain: Chain, *, overlap: int) -> ChainRow:
    agreement = chain.agreement if chain.finished_count >= 2 else None
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
        reviewer=getattr(chain, "reviewer_name", None),
        created_at=chain.created_at,
        routing=chain.routing,
        evaluation_set=getattr(chain, "evaluation_set_name", None),
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
class EventRecord:
    """A lead's action on the chain (``ChainEvent``), for its history."""

    event_id: int
    kind: str
    label: str
    actor: str | None
    detail: dict[str, Any]
    bulk_action_id: int | None
    created_at: datetime


# A chain's history shows its newest actions; a chain a lead acted on more often than
# this says how many there were.
EVENTS_SHOWN = 100


@dataclass(frozen=True)
class ChainDetail:
    chain: Chain
    status: str
    needed: int
    leases: list[LeaseRecord]
    step_scores: list[float] | None
    steps: list[Step]
    reviewer: str | None
    events: list[EventRecord]
    event_count: int


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
            leased=Exists(_live_leases()),
            skipped=Exists(_skips()),
            ruled=Exists(_ruling()),
            reviewer_name=F("reviewer__username"),
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
        reviewer=listed.reviewer_name,
        events=chain_events(chain=chain),
        event_count=ChainEvent.objects.filter(chain=chain).count(),
    )


def chain_events(*, chain: Chain) -> list[EventRecord]:
    """The chain's newest EVENTS_SHOWN actions by leads, newest first (one query)."""
    events = (
        ChainEvent.objects.filter(chain=chain)
        .select_related("actor")
        .order_by("-id")[:EVENTS_SHOWN]
    )
    return [
        EventRecord(
            event_id=event.pk,
            kind=event.kind,
            label=ChainEventKind(event.kind).label,
            actor=event.actor.username if event.actor else None,
            detail=event.detail,
            bulk_action_id=event.bulk_action_id,
            created_at=event.created_at,
        )
        for event in events
    ]
