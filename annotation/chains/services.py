"""The data manager's writes on chains: asking finished chains for more labels, and
naming the lead who is to review them. Unflagging and marking gold have their own
services (``workspace.chains_flag_clear``, ``gold.chains_gold_mark``). Each takes a set
of chain ids (``chain_changes``): the chain page calls it with one, a bulk action with a
batch."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from annotation.chains.changes import Changed, chain_events_record, chains_lock_sorted
from annotation.labeling.queue.closed_leases import closed_leases_sync
from annotation.models import (
    Assignment,
    BulkAction,
    Chain,
    ChainEventKind,
    ChainRouting,
    Membership,
    Project,
    Role,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

EXTRA_LABELS_MAX = 50

GOLD = "gold (offered to everyone already)"
AT_THE_CAP = f"already asks for {EXTRA_LABELS_MAX} passes past the overlap"
ALREADY_THEIRS = "already has this reviewer"


def requeue_reasons(*, project: Project, more: int) -> dict[str, Q]:
    """Why ``chains_requeue`` leaves a chain as it is: gold, or asking for ``more`` would
    take it past EXTRA_LABELS_MAX passes beyond the overlap."""
    return {
        GOLD: Q(is_gold=True),
        AT_THE_CAP: Q(finished_count__gt=project.overlap + EXTRA_LABELS_MAX - more),
    }


def chains_requeue(
    *,
    project: Project,
    chain_ids: Iterable[int],
    more: int = 1,
    actor: User | None = None,
    bulk_action: BulkAction | None = None,
    now: datetime | None = None,
) -> Changed:
    """Ask for ``more`` human passes on each chain beyond what it has: its needed count
    becomes ``finished_count + more`` (``Chain.extra_labels`` over the project's overlap)
    and it is no longer finished, so the queue offers it again and finished-only
    snapshots leave it out until the new passes come in (unless a lead's ruling settles
    it). Gold chains and chains at the cap are left (``requeue_reasons``). ValidationError
    when ``more`` is out of range. The caller checks that the user leads the project.

    Under the chains' row locks (as a submit takes), so a submit in flight counts either
    before the requeue (and the chain still asks for ``more`` after it) or after."""
    if not 1 <= more <= EXTRA_LABELS_MAX:
        raise ValidationError({"more": f"Ask for 1 to {EXTRA_LABELS_MAX} more labels."})
    now = now or timezone.now()
    with transaction.atomic():
        outcome = chains_lock_sorted(
            project=project,
            chain_ids=chain_ids,
            reasons=requeue_reasons(project=project, more=more),
        )
        chains = list(Chain.objects.filter(pk__in=outcome.changed).only("pk", "finished_count"))
        needed: dict[int, int] = {}
        for chain in chains:
            chain.extra_labels = max(0, chain.finished_count + more - project.overlap)
            needed[chain.pk] = project.overlap + chain.extra_labels
            chain.is_finished = chain.finished_count >= needed[chain.pk]
        Chain.objects.bulk_update(chains, ["extra_labels", "is_finished"])
        # A lead asking people for a machine-agreed chain puts it back in the queue, and
        # routing leaves a requeued chain to people from then on (routing.services).
        Chain.objects.filter(pk__in=outcome.changed, routing=ChainRouting.AGREED).update(
            routing=ChainRouting.NONE
        )
        closed_leases_sync(leases=Assignment.objects.filter(chain_id__in=outcome.changed))
        chain_events_record(
            chain_ids=outcome.changed,
            kind=ChainEventKind.REQUEUED,
            actor=actor,
            now=now,
            detail=lambda chain_id: {"more": more, "needed": needed[chain_id]},
            bulk_action=bulk_action,
        )
    return outcome


def chain_requeue(*, chain: Chain, more: int = 1, actor: User | None = None) -> Chain:
    """``chains_requeue`` for one chain, refusing what it would leave: ValidationError for
    a gold chain or one at the cap. The chain with its new counts."""
    with transaction.atomic():
        outcome = chains_requeue(
            project=chain.project, chain_ids=[chain.pk], more=more, actor=actor
        )
        if outcome.left_for(GOLD):
            raise ValidationError({"chain": "A gold chain is offered to everyone already."})
        if outcome.left_for(AT_THE_CAP):
            raise ValidationError(
                {"more": f"A chain asks for at most {EXTRA_LABELS_MAX} passes past the overlap."}
            )
    return Chain.objects.get(pk=chain.pk)


def reviewer_check(*, project: Project, reviewer: User | None) -> None:
    """ValidationError unless ``reviewer`` (None: nobody) leads ``project``."""
    if reviewer is None:
        return
    if not Membership.objects.filter(project=project, user=reviewer, role=Role.LEAD).exists():
        raise ValidationError({"reviewer": "A reviewer is a lead of this project."})


def reviewer_reasons(*, reviewer: User | None) -> dict[str, Q]:
    if reviewer is None:
        return {ALREADY_THEIRS: Q(reviewer__isnull=True)}
    return {ALREADY_THEIRS: Q(reviewer=reviewer)}


def chains_reviewer_set(
    *,
    project: Project,
    chain_ids: Iterable[int],
    reviewer: User | None,
    actor: User | None = None,
    bulk_action: BulkAction | None = None,
    now: datetime | None = None,
) -> Changed:
    """Name ``reviewer`` (a lead of ``project``; None: nobody) as the lead who is to look
    at each chain; chains that have that reviewer already are left. ValidationError for a
    reviewer who does not lead the project. The caller checks that the user leads it."""
    reviewer_check(project=project, reviewer=reviewer)
    now = now or timezone.now()
    with transaction.atomic():
        outcome = chains_lock_sorted(
            project=project, chain_ids=chain_ids, reasons=reviewer_reasons(reviewer=reviewer)
        )
        Chain.objects.filter(pk__in=outcome.changed).update(reviewer=reviewer)
        named = {"reviewer": reviewer.username if reviewer else None}
        chain_events_record(
            chain_ids=outcome.changed,
            kind=ChainEventKind.REVIEWER,
            actor=actor,
            now=now,
            detail=lambda _chain_id: named,
            bulk_action=bulk_action,
        )
    return outcome
