"""Claim a lease: ``next`` (the caller's oldest live lease, or a new one) and ``prefetch``
(a second lease on another chain for the workspace to show next)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, NamedTuple

from django.contrib.auth import get_user_model
from django.db import connection, transaction

from annotation.labeling.queue.errors import QueueBusy
from annotation.labeling.queue.leases import (
    Lease,
    LeasedChain,
    leased_chain,
    leased_chain_from_rows,
    now_or_current,
    sql_params,
)
from annotation.labeling.queue.prelabels import prelabel_plan, verdicts_from_db
from annotation.labeling.queue.rows import fetch_models
from annotation.labeling.queue.sql import (
    CANDIDATE_SQL,
    GOLD_CANDIDATE_SQL,
    GOLD_LOCK_SQL,
    LIVE_LEASES_SQL,
    LOCK_USER_SQL,
    RECHECK_SQL,
    lease_sql,
)
from annotation.models import Assignment, AssignmentStatus, Project
from annotation.quality.gold import gold_candidate
from annotation.quality.gold_reads import gold_order_key

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# A claim retries only when a concurrent transaction committed a lease or submit on its
# candidate between the candidate query's snapshot and the lock; each retry starts from a
# fresh snapshot, so more than a couple in a row means heavy contention, not a bug.
CLAIM_MAX_ATTEMPTS = 8


class _ClaimRace(Exception):
    """Internal: the locked candidate was taken meanwhile; roll back and try again."""


class _WaitWithoutDecoy(Exception):
    """Internal: the claim must wait for a locked chain while it holds a gold chain's lock
    it took only to look like a gold claim; roll back (releasing it) and claim again
    without that lock, so no wait ever holds a chain lock (no deadlock cycle)."""


# A claim's lease, with its chain when the claim read it in the same trip (a new lease on
# PostgreSQL); None: the chain is read when an answer needs it.
_Claimed = tuple[Assignment, LeasedChain | None]


# At most this many live leases per annotator and project: the one being labeled and the
# one the workspace prefetched (``lease_prefetch``).
MAX_LIVE_LEASES = 2


def _row_lock() -> str:
    """The claim's lock on the chain row it may lease (none on SQLite, whose writers are
    serialized: the module doc)."""
    return "FOR NO KEY UPDATE OF c" if connection.features.has_select_for_update else ""


def _candidate(
    *, project: Project, user: User, now: datetime, skip: set[int], wait: bool
) -> int | None:
    """Lock the best claimable chain and return its id, skipping chains locked by others
    unless ``wait``. Its subqueries see the snapshot from before the lock (see the
    re-check)."""
    params = sql_params(project=project, user=user, now=now)
    skip_sql = ""
    if skip:
        names = [f"skip{i}" for i in range(len(skip))]
        skip_sql = "AND c.id NOT IN (" + ", ".join(f"%({n})s" for n in names) + ")"
        params.update(zip(names, sorted(skip), strict=True))
    lock = _row_lock()
    if lock and not wait:
        lock += " SKIP LOCKED"
    sql = CANDIDATE_SQL.format(skip=skip_sql, lock=lock)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return row[0] if row is not None else None


def _gold_candidate(*, project: Project, user: User, now: datetime) -> int | None:
    """Lock the next gold chain the caller may be offered, in their own keyed shuffle,
    skipping those locked by others, and return its id; None when there is none
    (``GOLD_CANDIDATE_SQL``)."""
    params = sql_params(project=project, user=user, now=now)
    params["gold_order"] = gold_order_key(project=project, annotator=user)
    lock = _row_lock()
    sql = GOLD_CANDIDATE_SQL.format(lock=f"{lock} SKIP LOCKED" if lock else "")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return row[0] if row is not None else None


class _GoldTurn(NamedTuple):
    """What gold makes of one claim: the gold chain it leases (locked; None: real work),
    whether it gets nothing at all, and whether it holds a gold chain's lock it does not
    lease (``decoy``)."""

    chain_id: int | None = None
    blocked: bool = False
    decoy: bool = False


def _gold_chain(
    *, project: Project, user: User, now: datetime, mine: set[int], decoys: bool
) -> _GoldTurn:
    """Gold's part in this claim, by ``quality.gold.gold_candidate``'s pick.

    Under a gold rate every claim asks the gold query and then (the caller) the real
    work's candidate query, each locking its row, and leases one of the two by the same
    lease statement (``sql.CLAIMABLE_SQL``): a gold claim and a real one run the same
    statements at the same cost, so that what an annotator times tells them nothing (a
    gold claim that took its own path cost twice a real one; locking only the row it
    leased still told it apart, AUC 0.57 over HTTP). Without ``decoys`` (a claim that
    must wait for a locked chain) a real claim skips the gold query."""
    pick = gold_candidate(project=project, user=user, now=now)
    if pick.blocked:
        return _GoldTurn(blocked=True)
    if pick.chain_id is not None:  # screening: only gold, no real claim to look like
        if pick.chain_id in mine:
            return _GoldTurn()
        locked = _gold_lock(chain_id=pick.chain_id)
        # None: no longer gold, nothing to screen with right now
        return _GoldTurn(chain_id=locked, blocked=locked is None)
    if not project.gold_rate or not (pick.drawn or decoys):
        return _GoldTurn()
    found = _gold_candidate(project=project, user=user, now=now)
    if pick.drawn:
        return _GoldTurn(chain_id=found)
    return _GoldTurn(decoy=found is not None)


def _gold_lock(*, chain_id: int) -> int | None:
    """Lock the gold chain the screening picked; None if it is no longer gold (the lock
    keeps a concurrent ``gold_unmark`` from turning it into real work under a lease that
    ignored the overlap)."""
    with connection.cursor() as cursor:
        cursor.execute(GOLD_LOCK_SQL.format(lock=_row_lock()), {"chain": chain_id})
        row = cursor.fetchone()
    return row[0] if row is not None else None


def _recheck(*, project: Project, user: User, now: datetime, chain_id: int) -> tuple[bool, bool]:
    """(still claimable, has stale ACTIVE leases) for a chain whose lock we hold, read by a
    fresh statement so it sees every lease and submit committed before the lock."""
    with connection.cursor() as cursor:
        cursor.execute(RECHECK_SQL, sql_params(project=project, user=user, now=now, chain=chain_id))
        claimable, has_stale = cursor.fetchone()
    return bool(claimable), bool(has_stale)


def _live_leases_of(*, project: Project, user: User, now: datetime) -> list[Assignment]:
    """The caller's live leases in ``project``, oldest first. Precondition: the caller's
    claim lock is held, and this statement started after it was granted."""
    params: dict[str, Any] = {"project": project.pk, "user": user.pk}
    params["now"] = connection.ops.adapt_datetimefield_value(now)
    return fetch_models(Assignment, LIVE_LEASES_SQL, params)


def _expire_stale_leases(*, chain_id: int, now: datetime) -> None:
    """Mark the chain's ACTIVE leases that have run out EXPIRED.

    Precondition: the chain's row lock is held. After this, a lease whose place is about
    to be taken can no longer pass for live in a submit or renew."""
    Assignment.objects.filter(
        chain_id=chain_id, status=AssignmentStatus.ACTIVE, expires_at__lte=now
    ).update(status=AssignmentStatus.EXPIRED)


def _lease_if_free(
    *, project: Project, user: User, now: datetime, chain_id: int
) -> _Claimed | None:
    """Lease the chain whose lock we hold if its place is still free; None if not (a lost
    race, or stale leases to expire first: ``_claim_once`` asks ``_recheck`` which).

    On PostgreSQL the same trip reads what the lease shows of its chain; the same
    statement stores the chain's pre-labels when the project has them (``prelabels``)."""
    expires_at = now + project.lease_duration
    plan = prelabel_plan(project=project, chain_id=chain_id, user_id=user.pk)
    params = sql_params(project=project, user=user, now=now, chain=chain_id)
    params["expires"] = connection.ops.adapt_datetimefield_value(expires_at)
    params.update(plan.sql_params())
    with_chain = connection.vendor == "postgresql"
    sql = lease_sql(vendor=connection.vendor, with_chain=with_chain, prelabels=bool(plan.source))
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    if not rows:
        return None
    row = rows[0]
    lease = Assignment(
        id=row[0],
        project=project,
        chain_id=chain_id,
        annotator=user,
        status=AssignmentStatus.ACTIVE,
        created_at=now,
        expires_at=expires_at,
        finished_at=None,
        skip_reason="",
        prelabel_source=plan.source,
        prelabels=verdicts_from_db(row[1]),
        prelabels_shown=plan.shown,
    )
    lease._state.adding = False  # a stored row, as if loaded: save() updates it
    lease._state.db = connection.alias
    return lease, leased_chain_from_rows([r[2:] for r in rows]) if with_chain else None


def _claim_once(
    *,
    project: Project,
    user: User,
    now: datetime,
    skip: set[int],
    prefetch: bool = False,
    decoys: bool = True,
) -> _Claimed | None:
    # One claim per person at a time: without this a double-clicked "next" could give the
    # same annotator two chains (the second one's place idle until it expires), and two
    # prefetches could give a third lease. Plain SQL: building this one-row lock as a
    # queryset cost more than running it.
    # SQLite has no row locks: there BEGIN IMMEDIATE serializes writers (see the module doc).
    lock = "FOR NO KEY UPDATE" if connection.features.has_select_for_update else ""
    sql = LOCK_USER_SQL.format(table=get_user_model()._meta.db_table, lock=lock)
    with connection.cursor() as cursor:
        cursor.execute(sql, [user.pk])

    live = _live_leases_of(project=project, user=user, now=now)
    if live and not prefetch:
        return live[0], None  # next: the oldest, so two tabs of one annotator get the same lease
    if len(live) >= MAX_LIVE_LEASES:
        return live[-1], None  # prefetch again: the one it gave before
    # A prefetch leases a chain other than the one the caller holds.
    mine = {lease.chain_id for lease in live}
    skip |= mine

    # Gold chains and screening (annotation/quality/gold.py); no query unless used.
    gold = _GoldTurn()
    if project.gold_rate or project.screening_chains:
        gold = _gold_chain(project=project, user=user, now=now, mine=mine, decoys=decoys)
        if gold.blocked:
            return None
    if gold.chain_id is not None:
        # The real work's query too, locking and unused: a gold claim runs the statements
        # a real one does, so its time does not tell gold apart (``_gold_chain``).
        _candidate(project=project, user=user, now=now, skip=skip, wait=False)
        chain_id: int | None = gold.chain_id
    else:
        chain_id = _candidate(project=project, user=user, now=now, skip=skip, wait=False)
    if chain_id is None and gold.decoy:
        raise _WaitWithoutDecoy
    if chain_id is None:
        # Chains locked right now by a submit or another claim were skipped; one of them
        # may still have a free place, and answering "nothing left" would send the
        # annotator home. Wait for the best one instead (we hold no chain lock here, so
        # this wait cannot close a deadlock cycle).
        chain_id = _candidate(project=project, user=user, now=now, skip=skip, wait=True)
        if chain_id is None:
            return None

    # The candidate query's subqueries read a snapshot from before the lock; a lease or
    # submit committed in between is invisible to them. The lease is inserted by a fresh
    # statement that checks again.
    claimed = _lease_if_free(project=project, user=user, now=now, chain_id=chain_id)
    if claimed is not None:
        return claimed
    claimable, has_stale = _recheck(project=project, user=user, now=now, chain_id=chain_id)
    if not claimable:
        skip.add(chain_id)
        raise _ClaimRace
    if has_stale:
        # Also frees the caller's own stale lease on this chain, which the constraint
        # "one live lease per annotator and chain" would otherwise reject.
        _expire_stale_leases(chain_id=chain_id, now=now)
    claimed = _lease_if_free(project=project, user=user, now=now, chain_id=chain_id)
    if claimed is None:  # cannot happen under the lock; never lease past the overlap anyway
        skip.add(chain_id)
        raise _ClaimRace
    return claimed


def _claim(*, project: Project, user: User, now: datetime, prefetch: bool) -> _Claimed | None:
    skip: set[int] = set()
    decoys = True
    for _attempt in range(CLAIM_MAX_ATTEMPTS):
        try:
            # A savepoint per attempt: rolling a lost race back also releases the row
            # lock on its candidate, so a retry never waits while holding a chain lock.
            with transaction.atomic():
                return _claim_once(
                    project=project,
                    user=user,
                    now=now,
                    skip=skip,
                    prefetch=prefetch,
                    decoys=decoys,
                )
        except _ClaimRace:
            continue
        except _WaitWithoutDecoy:
            decoys = False
    raise QueueBusy("The queue is busy right now; please try again.")


def _lease(claimed: _Claimed | None) -> Lease | None:
    if claimed is None:
        return None
    assignment, chain = claimed
    if chain is None:
        chain = leased_chain(chain_id=assignment.chain_id)
    return Lease(assignment=assignment, chain=chain)


def lease_next(*, project: Project, user: User, now: datetime | None = None) -> Lease | None:
    """Lease the next chain of ``project`` to ``user``, or return None if none is left.

    If the caller already holds a live lease in this project, the oldest one is returned
    unchanged ("next" is idempotent, and after a submit it answers with the lease that
    ``lease_prefetch`` took). Otherwise the highest-priority, then oldest, chain that is
    not finished or flagged, that the caller never submitted, skipped or annotated, and
    whose finished annotations plus live leases are below the project's overlap, is
    leased for ``project.lease_duration``. The lease comes with what it shows of its chain
    (on PostgreSQL a new lease reads it in the same trip).

    Precondition: the caller is allowed to label in ``project`` (the API checks it with
    ``project_get_for_labeling``). Raises QueueBusy if every bounded retry lost a race."""
    return _lease(_claim(project=project, user=user, now=now_or_current(now), prefetch=False))


def lease_prefetch(*, project: Project, user: User, now: datetime | None = None) -> Lease | None:
    """Lease a second chain to ``user`` while they work on their current one, so the
    workspace can show it the moment the current one is submitted.

    The new lease is on a chain other than the caller's live lease(s), chosen and counted
    against the overlap exactly as ``lease_next`` does. A caller holds at most
    ``MAX_LIVE_LEASES`` live leases per project: when they already do, the newest one is
    returned unchanged (idempotent). A caller holding none gets one, as from ``next``.
    Returns None when nothing else is left for the caller. Same precondition and errors
    as ``lease_next``."""
    return _lease(_claim(project=project, user=user, now=now_or_current(now), prefetch=True))
