"""Routing (issue 23): the lead's rules for which chains machines may settle and which go
to people first.

- The lead picks ``Project.routing_sources``. A source whose Cohen's kappa against
  people's consensus (``quality.machine_quality``) is below ``routing_min_kappa``, or
  not measured yet, routes nothing: the page says which and why.
- Each usable source's verdict on a chain is its settled first error
  (``annotation.first_error``: no error only once it labeled the last step).
  Where two or more usable sources give a verdict and they differ, the chain is
  DISAGREED and goes to people before any other (``Chain.people_first``).
- Where every usable source (two at least) gives the same verdict and the lead opted in
  (``routing_accept``), the chain is AGREED: out of the queue, its machine labels
  marked machine-agreed in every export. A share of them (``routing_spot_check``, fixed
  per chain by a keyed hash) is a SPOT_CHECK instead: served to a person like any chain,
  and their consensus measures how often machine agreement is wrong
  (``routing.selectors.routing_summary``).
- A person's label that the active PRM contradicts with high confidence gets a second
  look by another annotator (``chains_second_look``, called by the training app after a
  scoring run): one more pass is asked for and the chain goes first.

Routing only moves chains nobody has started on (no human pass, no live lease, never
requeued by a lead, not gold, flagged or held out); a chain is re-routed on every pass,
so a source that falls below the threshold, or a new run that disagrees, sends an
accepted chain back to people.
Each change is one ``ChainEvent`` in the chain's history. The pass runs as a task
(``annotation.tasks.chains_route_task``) when a machine-label run finishes and when the
lead saves the rules."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from celery import current_app
from django.db import transaction
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from annotation.chains.changes import chain_events_record, chains_lock_sorted
from annotation.chains.services import chains_requeue
from annotation.first_error import first_error
from annotation.models import (
    Annotation,
    AnnotationSource,
    Assignment,
    AssignmentStatus,
    Chain,
    ChainEvent,
    ChainEventKind,
    ChainRouting,
    MachineSource,
    Project,
)
from annotation.public_ids import keyed_share
from annotation.quality.machine_quality import machine_source_quality
from annotation.routing.machine_labels import machine_chain_labels
from annotation.routing.sources import HOW_TO_WRITE

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)

# The routing pass's task (``annotation.tasks.chains_route_task``, queue ``default``).
ROUTE_TASK = "annotation.chains_route"
# The project's fields that decide routing: a change to any of them re-routes.
ROUTING_FIELDS = (
    "routing_sources",
    "routing_accept",
    "routing_spot_check",
    "routing_min_kappa",
    "routing_second_look",
)
# Chains locked and written per transaction: a claim waits on a chain's row lock.
ROUTING_CHUNK = 500
# Acceptance needs this many usable sources agreeing: one source agreeing with itself
# is no check.
MIN_AGREEING_SOURCES = 2


@dataclass(frozen=True, slots=True)
class RoutingSource:
    """One of the lead's sources: its kappa against people's consensus and whether it
    routes (``reason`` says why not)."""

    source: str
    name: str
    kappa: float | None
    chains_compared: int
    usable: bool
    reason: str


@dataclass(slots=True)
class RoutingOutcome:
    """What one routing pass did: chains per routing after it, and how many changed."""

    sources: list[RoutingSource]
    routed: Counter[str] = field(default_factory=Counter)
    changed: int = 0


def spot_checked(*, project_id: int, chain_id: int, share: float) -> bool:
    """Whether a machine-agreed chain goes to a person anyway: a uniform number in [0, 1)
    fixed by the two ids, keyed with a secret, below ``share``.

    >>> spot_checked(project_id=1, chain_id=2, share=0.0)
    False
    >>> spot_checked(project_id=1, chain_id=2, share=1.0)
    True
    """
    return keyed_share("routing-spot-check", project_id, chain_id) < share


def routing_sources(*, project: Project) -> list[RoutingSource]:
    """The lead's routing sources with their kappa against people's consensus (none
    measured where the lead chose none: the quality figures read every machine label)."""
    if not project.routing_sources:
        return []
    quality = {q.source: q for q in machine_source_quality(project=project)}
    out = []
    for source in project.routing_sources:
        name = str(MachineSource(source).label) if source in MachineSource.values else source
        found = quality.get(source)
        against = found.against[0] if found is not None else None  # the consensus
        kappa = against.kappa if against is not None else None
        compared = against.chains if against is not None else 0
        if found is None:
            reason = f"has labeled no step of this project: {HOW_TO_WRITE.get(source, '')}"
        elif kappa is None:
            reason = "has no steps in common with people's consensus yet"
        elif kappa < project.routing_min_kappa:
            reason = f"kappa {kappa:.2f} is below the threshold {project.routing_min_kappa:.2f}"
        else:
            reason = ""
        out.append(
            RoutingSource(
                source=source,
                name=name,
                kappa=kappa,
                chains_compared=compared,
                usable=not reason,
                reason=reason,
            )
        )
    return out


def _started() -> Q:
    """A chain routing leaves alone: a person has a pass or a live lease on it, a lead
    asked for people on it (requeued it: the lead's word beats the machines'), or it is
    gold, flagged, held out or finished."""
    passes = Annotation.objects.filter(chain=OuterRef("pk")).exclude(source=AnnotationSource.IMPORT)
    leases = Assignment.objects.filter(
        chain=OuterRef("pk"), status=AssignmentStatus.ACTIVE, expires_at__gt=timezone.now()
    )
    requeued = ChainEvent.objects.filter(chain=OuterRef("pk"), kind=ChainEventKind.REQUEUED)
    return (
        Q(Exists(passes))
        | Q(Exists(leases))
        | Q(Exists(requeued))
        | Q(is_gold=True)
        | Q(is_flagged=True)
        | Q(is_finished=True)
        | Q(evaluation_set__isnull=False)
    )


def _decide(
    *, project: Project, chain_id: int, verdicts: list[int]
) -> tuple[str, bool, int | None]:
    """(routing, people_first, agreed first error) of a chain from its usable sources'
    verdicts."""
    if len(set(verdicts)) > 1:
        return ChainRouting.DISAGREED, True, None
    if len(verdicts) >= MIN_AGREEING_SOURCES and project.routing_accept:
        share = project.routing_spot_check
        if spot_checked(project_id=project.pk, chain_id=chain_id, share=share):
            return ChainRouting.SPOT_CHECK, False, verdicts[0]
        return ChainRouting.AGREED, False, verdicts[0]
    return ChainRouting.NONE, False, None


def chains_route(*, project: Project, now: datetime | None = None) -> RoutingOutcome:
    """One routing pass over the project's chains nobody has started on (module
    docstring). Idempotent: a second pass with nothing new changes nothing."""
    now = now or timezone.now()
    sources = routing_sources(project=project)
    usable = [s.source for s in sources if s.usable]
    verdicts: dict[int, list[int]] = {}
    for source in usable:
        for chain_id, (labels, _confidence) in machine_chain_labels(
            project_id=project.pk, source=source
        ).items():
            verdict = first_error(labels, reading="settled")
            if verdict is not None:
                verdicts.setdefault(chain_id, []).append(verdict)
    # Chains routing put somewhere before, and chains with verdicts now.
    routed_before = set(
        Chain.objects.filter(project=project)
        .exclude(routing=ChainRouting.NONE)
        .exclude(routing=ChainRouting.SECOND_LOOK)
        .values_list("pk", flat=True)
    )
    outcome = RoutingOutcome(sources=sources)
    wanted = sorted(routed_before | set(verdicts))
    for start in range(0, len(wanted), ROUTING_CHUNK):
        outcome.changed += _route_chunk(
            project=project,
            chain_ids=wanted[start : start + ROUTING_CHUNK],
            verdicts=verdicts,
            now=now,
        )
    outcome.routed.update(
        Chain.objects.filter(project=project)
        .exclude(routing=ChainRouting.NONE)
        .values_list("routing", flat=True)
    )
    return outcome


def _route_chunk(
    *, project: Project, chain_ids: list[int], verdicts: dict[int, list[int]], now: datetime
) -> int:
    """Route one chunk under its chains' row locks; how many chains changed."""
    with transaction.atomic():
        outcome = chains_lock_sorted(
            project=project, chain_ids=chain_ids, reasons={"started": _started()}
        )
        current = {
            row[0]: row[1:]
            for row in Chain.objects.filter(pk__in=outcome.changed).values_list(
                "pk", "routing", "people_first", "routing_first_error"
            )
        }
        changed: list[Chain] = []
        for chain_id, before in current.items():
            after = _decide(project=project, chain_id=chain_id, verdicts=verdicts.get(chain_id, []))
            if tuple(before) != after:
                routing, people_first, first_error = after
                changed.append(
                    Chain(
                        pk=chain_id,
                        routing=routing,
                        people_first=people_first,
                        routing_first_error=first_error,
                    )
                )
        Chain.objects.bulk_update(changed, ["routing", "people_first", "routing_first_error"])
        by_id = {chain.pk: chain for chain in changed}
        chain_events_record(
            chain_ids=sorted(by_id),
            kind=ChainEventKind.ROUTED,
            actor=None,
            now=now,
            detail=lambda chain_id: {
                "routing": by_id[chain_id].routing,
                "first_error": by_id[chain_id].routing_first_error,
                "sources": verdicts.get(chain_id, []),
            },
        )
    return len(changed)


def chains_route_enqueue(*, project_id: int) -> bool:
    """Send a routing pass of the project to a worker; whether the broker took it. A pass
    not sent loses nothing: the next one (a saved rule, a finished machine-label run, the
    lead's "Route now") routes from scratch."""
    try:
        current_app.tasks[ROUTE_TASK].apply_async((project_id,))
    except Exception:  # noqa: BLE001 - the caller says so; routing state is unchanged
        logger.warning(
            "Broker unreachable: routing of project %s not sent", project_id, exc_info=True
        )
        return False
    return True


def chains_route_enqueue_on_commit(*, project_id: int) -> None:
    """``chains_route_enqueue`` once the current transaction commits, so the worker reads
    the rules as committed."""
    transaction.on_commit(lambda: chains_route_enqueue(project_id=project_id))


def chains_second_look(
    *,
    project: Project,
    contradictions: dict[int, dict[str, float | int]],
    actor: User | None = None,
    now: datetime | None = None,
) -> list[int]:
    """Ask another person to look again at chains whose human label the active PRM
    contradicts (``contradictions``: chain -> {"step", "rating", "value"} of the
    strongest contradiction): one more pass (``chains_requeue``), people first, routing
    SECOND_LOOK, the contradiction in the chain's history. A chain that had its second
    look already is left. The chains changed."""
    now = now or timezone.now()
    with transaction.atomic():
        fresh = sorted(
            Chain.objects.filter(project=project, pk__in=list(contradictions))
            .exclude(routing=ChainRouting.SECOND_LOOK)
            .values_list("pk", flat=True)
        )
        requeued = chains_requeue(
            project=project, chain_ids=fresh, more=1, actor=actor, now=now
        ).changed
        Chain.objects.filter(pk__in=requeued).update(
            routing=ChainRouting.SECOND_LOOK, people_first=True, routing_first_error=None
        )
        chain_events_record(
            chain_ids=requeued,
            kind=ChainEventKind.SECOND_LOOK,
            actor=actor,
            now=now,
            detail=lambda chain_id: dict(contradictions[chain_id]),
        )
    return list(requeued)
