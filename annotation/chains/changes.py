"""What every lead's action on chains does, to one chain or to thousands: lock the
chains, set aside those the action leaves as they are (each with its reason), and record
what it did in each changed chain's history (``ChainEvent``, shown on the chain page).

The actions themselves (requeue, mark and unmark gold, clear a flag, set a reviewer) are
each one service over a set of chain ids, in the module of what they change; the
single-chain endpoints and the data manager's bulk actions (``bulk_actions``) call the
same one. A bulk action calls it a batch at a time inside its one transaction, so each
call is bounded by the batch: one lock query, a query per reason, set-based writes, and
one insert of the batch's history rows."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db.models import Q

from annotation.models import BulkAction, Chain, ChainEvent, Project

if TYPE_CHECKING:
    from django.contrib.auth.models import User

NOT_IN_PROJECT = "not a chain of this project"


@dataclass
class Changed:
    """The outcome of an action on some chains: the ids it changed, and the ids it left
    as they were under each reason (the first reason that held for a chain)."""

    changed: list[int] = field(default_factory=list)
    unchanged: dict[str, list[int]] = field(default_factory=dict)

    def left_for(self, reason: str) -> list[int]:
        return self.unchanged.get(reason, [])


def chains_lock_sorted(
    *, project: Project, chain_ids: Iterable[int], reasons: Mapping[str, Q]
) -> Changed:
    """Lock the chains of ``project`` among ``chain_ids`` (``FOR NO KEY UPDATE``, in id
    order, so two actions on overlapping sets cannot deadlock, and a submit in flight
    counts either before or after) and sort them: ``unchanged`` under the first of
    ``reasons`` (name -> the chains it holds for) that holds, or NOT_IN_PROJECT for an
    id that is no chain of the project; the rest in ``changed``, to be changed by the
    caller in the same transaction. A query for the lock and one per reason."""
    wanted = sorted(set(chain_ids))
    found = list(
        Chain.objects.filter(project=project, pk__in=wanted)
        .order_by("pk")
        .select_for_update(no_key=True)
        .values_list("pk", flat=True)
    )
    outcome = Changed()
    missing = sorted(set(wanted) - set(found))
    if missing:
        outcome.unchanged[NOT_IN_PROJECT] = missing
    left = set(found)
    for reason, holds in reasons.items():
        if not left:
            break
        hit = set(Chain.objects.filter(pk__in=left).filter(holds).values_list("pk", flat=True))
        if hit:
            outcome.unchanged[reason] = sorted(hit)
            left -= hit
    outcome.changed = sorted(left)
    return outcome


def chain_events_record(
    *,
    chain_ids: Iterable[int],
    kind: str,
    actor: User | None,
    now: datetime,
    detail: Callable[[int], dict[str, Any]] | None = None,
    bulk_action: BulkAction | None = None,
) -> None:
    """One ``ChainEvent`` per chain of ``chain_ids``: ``kind`` done by ``actor`` at
    ``now``, with ``detail(chain_id)``, as part of ``bulk_action`` if any. One INSERT."""
    ChainEvent.objects.bulk_create(
        [
            ChainEvent(
                chain_id=chain_id,
                kind=kind,
                actor=actor,
                detail=detail(chain_id) if detail is not None else {},
                bulk_action=bulk_action,
                created_at=now,
            )
            for chain_id in chain_ids
        ]
    )
