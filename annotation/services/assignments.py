"""The labeling queue: lease a chain, renew the lease, skip it, submit its ratings.

Invariant 2 (a chain is never leased to more annotators than its overlap allows, counting
finished annotations, and never twice to the same annotator) and invariant 1 (no label is
lost or overwritten) live here. Every function is one transaction.

Locking protocol, which every writer of a chain's places follows:

* A chain's places are ``finished_count`` plus its live leases (ACTIVE, unexpired).
  Whoever takes a place (claim, renewing or submitting an expired lease) or fills one
  (submit) holds that chain's row lock (``SELECT ... FOR NO KEY UPDATE``) until commit,
  and decides only on rows read by a statement that started *after* the lock was
  granted. Under READ COMMITTED each statement sees everything committed before it
  began, so such a fresh statement sees every earlier holder's lease or submit. (The
  statement that takes the lock does not: its subqueries use the snapshot from before
  the lock, which is why the claim checks its candidate again.)
* A claim marks the chain's stale ACTIVE leases EXPIRED before it takes their place,
  while holding the lock. So a lease whose place went to someone else is never ACTIVE
  again, and a submit or renew under the same lock can trust an ACTIVE, unexpired lease.
* An annotator holds at most ``MAX_LIVE_LEASES`` (2) live leases per project: the chain
  being labeled and the one the workspace prefetched. ``next`` answers with the oldest,
  ``prefetch`` with the newest or a new one on another chain. Both decide under the
  caller's user-row lock (``_claim_once``), so concurrent requests of one annotator
  (tabs, double clicks) cannot take a third lease. A prefetched lease is an ordinary
  live lease: it takes a place in the overlap, expires and renews like any other.
* Lock order: the caller's user row, then one chain, then that chain's assignment rows.
  A claim that must wait for a chain holds no other chain lock while it waits, so
  claims cannot deadlock one another.
* Every change of a lease's status (submit, skip, renew, flag) holds its chain's lock and
  decides on the lease as read after it, so two of them on one lease are serialized and
  the later one sees the earlier one's outcome: a skip racing a submit of the same lease
  loses with LeaseClosed (or wins, and the submit does), never both.

``FOR NO KEY UPDATE`` rather than ``FOR UPDATE``: it still conflicts with every other
claim, submit and row update, but not with the key-share locks that inserting an
assignment or annotation takes on its chain and user through their foreign keys.

On SQLite (the demo default) ``select_for_update`` is a no-op; the settings open every
transaction with ``BEGIN IMMEDIATE``, which serializes writers, so the same code holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Model
from django.utils import timezone

from annotation.models import (
    Annotation,
    AnnotationSource,
    Assignment,
    AssignmentStatus,
    Chain,
    LabelingMode,
    Problem,
    Project,
    Rating,
    Step,
    StepRating,
)
from annotation.rows import fetch_models, model_from_row, model_width, select_columns
from annotation.selectors.access import project_member_sql
from annotation.services.gold import gold_candidate, gold_lease, gold_place_is_free

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# A claim retries only when a concurrent transaction committed a lease or submit on its
# candidate between the candidate query's snapshot and the lock; each retry starts from a
# fresh snapshot, so more than a couple in a row means heavy contention, not a bug.
CLAIM_MAX_ATTEMPTS = 8
REQUEST_ID_MAX_LENGTH = Annotation._meta.get_field("request_id").max_length or 100
VALID_RATINGS = frozenset(Rating.values)


@dataclass(frozen=True)
class RatingInput:
    """One step's grade in a submit."""

    step_id: int
    rating: int
    comment: str = ""
    duration_ms: int | None = None


class QueueError(Exception):
    """A queue operation was refused. ``code`` is a stable machine-readable name."""

    code = "queue_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class LeaseConflict(QueueError):
    """The lease can no longer be used: its place went to someone else, the chain is
    full, or the caller already finished this chain. The API answers 409."""

    code = "lease_conflict"


class LeaseLost(LeaseConflict):
    """The lease expired and its place was taken by another annotator."""

    code = "lease_lost"


class LeaseClosed(LeaseConflict):
    """The lease was already submitted or skipped."""

    code = "lease_closed"


class QueueBusy(QueueError):
    """Every retry of a claim lost its race; the caller should try again (API: 503)."""

    code = "queue_busy"


class _ClaimRace(Exception):
    """Internal: the locked candidate was taken meanwhile; roll back and try again."""


def _now(now: datetime | None) -> datetime:
    return now if now is not None else timezone.now()


# Keeps each NOT EXISTS below a probe per chain (an index lookup by chain and annotator).
# Without it PostgreSQL may plan the test as an anti-join against everything the annotator ever
# did, read in full on every claim: it does when its statistics predate the annotator's
# work, and in the generic plan of the prepared statement, where the annotator is a
# parameter. An OFFSET keeps PostgreSQL from turning the sub-select into a join (SQLite
# needs the LIMIT to take an OFFSET); the rows and the answer are the same.
_PROBE = "LIMIT 1 OFFSET 0"

# The queue's one predicate, in SQL, shared by the candidate scan, the re-check under the
# lock and the "is this expired lease's place still free" test, so they cannot drift apart.
# ``c`` is the chain. Live leases of the caller are not counted: a claim skips the chains
# the caller holds a live lease on (``skip``; ``next`` only claims when it holds none, a
# prefetch holds one), and an expired lease being taken back must not count the caller's
# newer lease on the chain.
# Hand-written rather than built by the ORM: this is the hot path, and building it as a
# queryset cost more than running it. Plain SQL that SQLite runs too.
_PLACE_FREE_SQL = f"""
    NOT c.is_finished
    AND c.finished_count + (
        SELECT COUNT(*) FROM {Assignment._meta.db_table} a
        WHERE a.chain_id = c.id AND a.status = '{AssignmentStatus.ACTIVE}'
          AND a.expires_at > %(now)s AND a.annotator_id <> %(user)s
    ) < %(overlap)s
    AND NOT EXISTS (
        SELECT 1 FROM {Assignment._meta.db_table} a
        WHERE a.chain_id = c.id AND a.annotator_id = %(user)s
          AND a.status IN ('{AssignmentStatus.SUBMITTED}', '{AssignmentStatus.SKIPPED}')
        {_PROBE}
    )
    AND NOT EXISTS (
        SELECT 1 FROM {Annotation._meta.db_table} n
        WHERE n.chain_id = c.id AND n.annotator_id = %(user)s
          AND n.source = '{AnnotationSource.HUMAN}'
        {_PROBE}
    )
"""

# Highest priority, then oldest. ``project_id``, ``NOT is_finished``, ``NOT is_flagged`` and
# the order match the partial index ``chain_queue_idx``: the scan walks the index and stops
# at the first chain that passes the per-chain probes.
# The ``NOT IN`` repeats a test of the predicate on purpose: PostgreSQL runs it as one hashed
# subplan (the caller's submitted and skipped chains, read once by the annotator index), so
# walking past chains the caller already did but that wait for other annotators costs a hash
# probe each instead of three index probes. An annotator labeling alone in a project with
# overlap 2 walks past everything they did: 2,000 such chains took 4.6 ms per claim with
# the probes and 1.3 ms with the hash (EXPLAIN ANALYZE on the 100,000-chain bench database).
# The set holds only closed leases on chains still in the queue (``chain_open``, index
# ``assignment_done_open``): the chains the walk can meet. Over the whole history it grew
# with every chain the annotator ever did, and so did every claim (1.9 ms at 300 chains
# each, against 0.38 ms without it). Being a subset of what the probes exclude, a stale
# flag only sends a chain to the probes.
_CANDIDATE_SQL = f"""
    SELECT c.id FROM {Chain._meta.db_table} c
    WHERE c.project_id = %(project)s AND NOT c.is_finished AND NOT c.is_flagged
      AND NOT c.is_gold
      AND c.id NOT IN (
          SELECT a.chain_id FROM {Assignment._meta.db_table} a
          WHERE a.annotator_id = %(user)s AND a.project_id = %(project)s AND a.chain_open
            AND a.status IN ('{AssignmentStatus.SUBMITTED}', '{AssignmentStatus.SKIPPED}')
      )
      AND {_PLACE_FREE_SQL} {{skip}}
    ORDER BY c.priority DESC, c.id
    LIMIT 1 {{lock}}
"""

_RECHECK_SQL = f"""
    SELECT (NOT c.is_flagged AND {_PLACE_FREE_SQL}),
           EXISTS (
               SELECT 1 FROM {Assignment._meta.db_table} a
               WHERE a.chain_id = c.id AND a.status = '{AssignmentStatus.ACTIVE}'
                 AND a.expires_at <= %(now)s
           )
    FROM {Chain._meta.db_table} c WHERE c.id = %(chain)s
"""

_PLACE_SQL = f"SELECT {_PLACE_FREE_SQL} FROM {Chain._meta.db_table} c WHERE c.id = %(chain)s"

# The lease itself, taken only if the re-check under the lock passes, in one statement: it
# starts after the candidate statement got the chain's lock, so (READ COMMITTED) it sees
# every lease and submit committed before. The common case costs this one round trip; when
# it inserts nothing, ``_recheck`` tells a lost race from stale leases to expire first.
_LEASE_IF_FREE_SQL = f"""
    INSERT INTO {Assignment._meta.db_table}
        (project_id, chain_id, annotator_id, status, created_at, expires_at, finished_at,
         skip_reason)
    SELECT %(project)s, c.id, %(user)s, '{AssignmentStatus.ACTIVE}', %(now)s, %(expires)s,
           NULL, ''
    FROM {Chain._meta.db_table} c
    WHERE c.id = %(chain)s AND NOT c.is_flagged AND {_PLACE_FREE_SQL}
      AND NOT EXISTS (
          SELECT 1 FROM {Assignment._meta.db_table} a
          WHERE a.chain_id = c.id AND a.status = '{AssignmentStatus.ACTIVE}'
            AND a.expires_at <= %(now)s
      )
    RETURNING id
"""

# PostgreSQL: the lease as above and, in the same trip, what the lease's answer shows (the
# chain's steps with its final answer and problem; ``Assignment.chain_rows``). No rows: no
# lease. SQLite cannot write inside a WITH, so there the answer reads them afterwards.
_LEASE_WITH_CHAIN_SQL = f"""
    WITH l AS ({_LEASE_IF_FREE_SQL})
    SELECT l.id, s.id, s."index", s.text, c.final_answer, p.text, p.reference_answer
    FROM l
    JOIN {Chain._meta.db_table} c ON c.id = %(chain)s
    JOIN {Problem._meta.db_table} p ON p.id = c.problem_id
    LEFT JOIN {Step._meta.db_table} s ON s.chain_id = c.id
    ORDER BY s."index"
"""

# The caller's live leases in a project, oldest first: ``next`` answers with the oldest,
# ``prefetch`` with the newest (index ``assignment_live_by_annotator``).
_LIVE_LEASES_SQL = f"""
    SELECT {select_columns(Assignment, "a")} FROM {Assignment._meta.db_table} a
    WHERE a.project_id = %(project)s AND a.annotator_id = %(user)s
      AND a.status = '{AssignmentStatus.ACTIVE}' AND a.expires_at > %(now)s
    ORDER BY a.id
"""

# At most this many live leases per annotator and project: the one being labeled and the
# one the workspace prefetched (``assignment_prefetch``).
MAX_LIVE_LEASES = 2


_LOCK_USER_SQL = "SELECT 1 FROM {table} WHERE id = %s {lock}"


def _sql_params(*, project: Project, user: User, now: datetime, **extra: object) -> dict:
    return {
        "project": project.pk,
        "user": user.pk,
        "overlap": project.overlap,
        "now": connection.ops.adapt_datetimefield_value(now),
        **extra,
    }


def _candidate(
    *, project: Project, user: User, now: datetime, skip: set[int], wait: bool
) -> int | None:
    """Lock the best claimable chain and return its id, skipping chains locked by others
    unless ``wait``. Its subqueries see the snapshot from before the lock (see the
    re-check)."""
    params = _sql_params(project=project, user=user, now=now)
    skip_sql = ""
    if skip:
        names = [f"skip{i}" for i in range(len(skip))]
        skip_sql = "AND c.id NOT IN (" + ", ".join(f"%({n})s" for n in names) + ")"
        params.update(zip(names, sorted(skip), strict=True))
    lock = ""
    if connection.features.has_select_for_update:
        lock = f"FOR NO KEY UPDATE OF c{'' if wait else ' SKIP LOCKED'}"
    sql = _CANDIDATE_SQL.format(skip=skip_sql, lock=lock)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return row[0] if row is not None else None


def _recheck(*, project: Project, user: User, now: datetime, chain_id: int) -> tuple[bool, bool]:
    """(still claimable, has stale ACTIVE leases) for a chain whose lock we hold, read by a
    fresh statement so it sees every lease and submit committed before the lock."""
    with connection.cursor() as cursor:
        cursor.execute(
            _RECHECK_SQL, _sql_params(project=project, user=user, now=now, chain=chain_id)
        )
        claimable, has_stale = cursor.fetchone()
    return bool(claimable), bool(has_stale)


def _live_leases_of(*, project: Project, user: User, now: datetime) -> list[Assignment]:
    """The caller's live leases in ``project``, oldest first. Precondition: the caller's
    claim lock is held, and this statement started after it was granted."""
    params: dict[str, Any] = {"project": project.pk, "user": user.pk}
    params["now"] = connection.ops.adapt_datetimefield_value(now)
    return fetch_models(Assignment, _LIVE_LEASES_SQL, params)


def _expire_stale_leases(*, chain_id: int, now: datetime) -> None:
    """Mark the chain's ACTIVE leases that have run out EXPIRED.

    Precondition: the chain's row lock is held. After this, a lease whose place is about
    to be taken can no longer pass for live in a submit or renew."""
    Assignment.objects.filter(
        chain_id=chain_id, status=AssignmentStatus.ACTIVE, expires_at__lte=now
    ).update(status=AssignmentStatus.EXPIRED)


def _lease_if_free(
    *, project: Project, user: User, now: datetime, chain_id: int
) -> Assignment | None:
    """Lease the chain whose lock we hold if its place is still free; None if not (a lost
    race, or stale leases to expire first: ``_claim_once`` asks ``_recheck`` which).

    On PostgreSQL the new lease carries ``chain_rows``, its chain's steps as (id, index,
    text, final answer, problem text, reference answer) rows, read in the same trip for
    the API's answer (``lease_payload``)."""
    expires_at = now + project.lease_duration
    params = _sql_params(project=project, user=user, now=now, chain=chain_id)
    params["expires"] = connection.ops.adapt_datetimefield_value(expires_at)
    with_chain = connection.vendor == "postgresql"
    with connection.cursor() as cursor:
        cursor.execute(_LEASE_WITH_CHAIN_SQL if with_chain else _LEASE_IF_FREE_SQL, params)
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
    )
    lease._state.adding = False  # a stored row, as if loaded: save() updates it
    lease._state.db = connection.alias
    if with_chain and row[1] is not None:  # (a chain without steps: the answer reads it)
        lease.chain_rows = [r[1:] for r in rows]  # type: ignore[attr-defined]
    return lease


def _claim_once(
    *, project: Project, user: User, now: datetime, skip: set[int], prefetch: bool = False
) -> Assignment | None:
    # One claim per person at a time: without this a double-clicked "next" could give the
    # same annotator two chains (the second one's place idle until it expires), and two
    # prefetches could give a third lease. Plain SQL: building this one-row lock as a
    # queryset cost more than running it.
    # SQLite has no row locks: there BEGIN IMMEDIATE serializes writers (see the module doc).
    lock = "FOR NO KEY UPDATE" if connection.features.has_select_for_update else ""
    sql = _LOCK_USER_SQL.format(table=get_user_model()._meta.db_table, lock=lock)
    with connection.cursor() as cursor:
        cursor.execute(sql, [user.pk])

    live = _live_leases_of(project=project, user=user, now=now)
    if live and not prefetch:
        return live[0]  # next: the oldest, so two tabs of one annotator get the same lease
    if len(live) >= MAX_LIVE_LEASES:
        return live[-1]  # prefetch again: the one it gave before
    # A prefetch leases a chain other than the one the caller holds.
    mine = {lease.chain_id for lease in live}
    skip |= mine

    # Gold chains and screening (annotation/services/gold.py); no query unless used.
    if project.gold_rate or project.screening_chains:
        pick = gold_candidate(project=project, user=user, now=now)
        if pick.blocked:
            return None
        if pick.chain is not None and pick.chain.pk not in mine:
            return gold_lease(project=project, user=user, chain=pick.chain, now=now)

    chain_id = _candidate(project=project, user=user, now=now, skip=skip, wait=False)
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
    lease = _lease_if_free(project=project, user=user, now=now, chain_id=chain_id)
    if lease is not None:
        return lease
    claimable, has_stale = _recheck(project=project, user=user, now=now, chain_id=chain_id)
    if not claimable:
        skip.add(chain_id)
        raise _ClaimRace
    if has_stale:
        # Also frees the caller's own stale lease on this chain, which the constraint
        # "one live lease per annotator and chain" would otherwise reject.
        _expire_stale_leases(chain_id=chain_id, now=now)
    lease = _lease_if_free(project=project, user=user, now=now, chain_id=chain_id)
    if lease is None:  # cannot happen under the lock; never lease past the overlap anyway
        skip.add(chain_id)
        raise _ClaimRace
    return lease


def _claim(*, project: Project, user: User, now: datetime, prefetch: bool) -> Assignment | None:
    skip: set[int] = set()
    for _attempt in range(CLAIM_MAX_ATTEMPTS):
        try:
            # A savepoint per attempt: rolling a lost race back also releases the row
            # lock on its candidate, so a retry never waits while holding a chain lock.
            with transaction.atomic():
                return _claim_once(
                    project=project, user=user, now=now, skip=skip, prefetch=prefetch
                )
        except _ClaimRace:
            continue
    raise QueueBusy("The queue is busy right now; please try again.")


def assignment_claim_next(
    *, project: Project, user: User, now: datetime | None = None
) -> Assignment | None:
    """Lease the next chain of ``project`` to ``user``, or return None if none is left.

    If the caller already holds a live lease in this project, the oldest one is returned
    unchanged ("next" is idempotent, and after a submit it answers with the lease that
    ``assignment_prefetch`` took). Otherwise the highest-priority, then oldest, chain
    that is not finished or flagged, that the caller never submitted, skipped or
    annotated, and whose finished annotations plus live leases are below the project's
    overlap, is leased for ``project.lease_duration``.

    Precondition: the caller is allowed to label in ``project`` (the API checks it with
    ``project_get_for_labeling``). The returned assignment has ``chain_id`` set (its
    ``chain`` loads on first use). Raises QueueBusy if every bounded retry lost a race."""
    return _claim(project=project, user=user, now=_now(now), prefetch=False)


def assignment_prefetch(
    *, project: Project, user: User, now: datetime | None = None
) -> Assignment | None:
    """Lease a second chain to ``user`` while they work on their current one, so the
    workspace can show it the moment the current one is submitted.

    The new lease is on a chain other than the caller's live lease(s), chosen and counted
    against the overlap exactly as ``assignment_claim_next`` does. A caller holds at most
    ``MAX_LIVE_LEASES`` live leases per project: when they already do, the newest one is
    returned unchanged (idempotent). A caller holding none gets one, as from ``next``.
    Returns None when nothing else is left for the caller. Same precondition and errors
    as ``assignment_claim_next``."""
    return _claim(project=project, user=user, now=_now(now), prefetch=True)


# The chain of the caller's own lease, locked, with its project's row alongside (the
# chain's columns, then the project's: ``annotation.rows``). The lease's owner and, unless
# the caller is a superuser, a membership in the project are part of the lookup: a lease
# of someone else, or of a project the caller left, is not found.
_LOCK_OWN_CHAIN_SQL = f"""
    SELECT {select_columns(Chain, "c")}, {select_columns(Project, "p")}
    FROM {Chain._meta.db_table} c
    JOIN {Project._meta.db_table} p ON p.id = c.project_id
    WHERE c.id = (
        SELECT a.chain_id FROM {Assignment._meta.db_table} a
        WHERE a.id = %(assignment)s AND a.annotator_id = %(user)s
    ) {{member}}
    {{lock}}
"""
_MEMBER_SQL = f"AND {project_member_sql(user='%(user)s')}"
# The lease with its chain's steps (id, index), one row per step (one with NULLs for a
# chain without steps), and the id of the caller's annotation that already carries the
# submit's request_id, if any: a submit reads all three after taking the chain lock, in
# one trip. (``n.request_id <> ''`` lets PostgreSQL use the partial unique index; the
# caller's id rather than the lease's column makes the lookup run once, not once a step.)
_ASSIGNMENT_WITH_STEPS_SQL = f"""
    SELECT {select_columns(Assignment, "a")}, s.id, s."index", (
        SELECT n.id FROM {Annotation._meta.db_table} n
        WHERE n.annotator_id = %(user)s AND n.request_id = %(request_id)s
          AND n.request_id <> ''
    )
    FROM {Assignment._meta.db_table} a
    LEFT JOIN {Step._meta.db_table} s ON s.chain_id = a.chain_id
    WHERE a.id = %(assignment)s
    ORDER BY s."index"
"""
_LEASE_SUBMITTED_SQL = (
    f"UPDATE {Assignment._meta.db_table} SET status = '{AssignmentStatus.SUBMITTED}', "
    "finished_at = %s, chain_open = %s WHERE id = %s"
)
_CHAIN_COUNTED_SQL = (
    f"UPDATE {Chain._meta.db_table} SET finished_count = %s, is_finished = %s WHERE id = %s"
)
# The submit that finishes a chain takes it out of its annotators' sets of closed leases
# on open chains (``Assignment.chain_open``). In the submit's WITH, the lease being
# submitted still reads as ACTIVE, so this leaves it to ``_LEASE_SUBMITTED_SQL``.
_CHAIN_SHUT_SQL = (
    f"UPDATE {Assignment._meta.db_table} SET chain_open = FALSE "
    f"WHERE chain_id = %s AND chain_open "
    f"AND status IN ('{AssignmentStatus.SUBMITTED}', '{AssignmentStatus.SKIPPED}')"
)


def _lock_own_chain(*, assignment_id: int, user: User) -> Chain:
    """Lock the chain of the caller's assignment ``assignment_id``, with ``chain.project``
    loaded.

    A lease of someone else, or of a project the caller no longer belongs to, is reported
    as missing (Assignment.DoesNotExist) so its existence is not revealed. Plain SQL: this
    is half of every submit, and the queryset cost more to build than to run."""
    lock = "FOR NO KEY UPDATE OF c" if connection.features.has_select_for_update else ""
    member = "" if user.is_superuser else _MEMBER_SQL
    sql = _LOCK_OWN_CHAIN_SQL.format(member=member, lock=lock)
    with connection.cursor() as cursor:
        cursor.execute(sql, {"assignment": assignment_id, "user": user.pk})
        row = cursor.fetchone()
    if row is None:
        raise Assignment.DoesNotExist("No such assignment.")
    width = model_width(Chain)
    chain = model_from_row(Chain, row[:width])
    chain.project = model_from_row(Project, row[width:])
    return chain


def _place_is_free(*, chain: Chain, user: User, now: datetime) -> bool:
    """Whether ``user`` may hold a place on ``chain`` now, not counting the user's own
    leases: the chain is not full and the user has not finished it already.

    Precondition: the chain's row lock is held (so this fresh read is current)."""
    if chain.is_gold:  # no overlap on gold chains: annotation/services/gold.py
        return gold_place_is_free(chain=chain, user=user)
    params = _sql_params(project=chain.project, user=user, now=now, chain=chain.pk)
    with connection.cursor() as cursor:
        cursor.execute(_PLACE_SQL, params)
        (free,) = cursor.fetchone()
    return bool(free)


def _lease_with_steps(
    *, assignment_id: int, user: User, request_id: str
) -> tuple[Assignment, list[tuple[int, int]], int | None]:
    """The lease ``assignment_id`` as stored now, its chain's steps as (id, index) in
    order, and the id of ``user``'s annotation with ``request_id`` (None if none, or if
    ``request_id`` is empty). Precondition: the chain's row lock is held and the lease is
    ``user``'s (``_lock_own_chain``)."""
    params: dict[str, Any] = {
        "assignment": assignment_id,
        "user": user.pk,
        "request_id": request_id,
    }
    with connection.cursor() as cursor:
        cursor.execute(_ASSIGNMENT_WITH_STEPS_SQL, params)
        rows = cursor.fetchall()
    width = model_width(Assignment)
    steps = [(row[width], row[width + 1]) for row in rows if row[width] is not None]
    return model_from_row(Assignment, rows[0][:width]), steps, rows[0][width + 2]


def _take_back_expired(*, chain: Chain, assignment: Assignment, user: User, now: datetime) -> None:
    """Let the caller keep working on an expired lease if its place is still free;
    otherwise raise LeaseLost. Precondition: the chain's row lock is held."""
    if not _place_is_free(chain=chain, user=user, now=now):
        raise LeaseLost(
            "Your lease on this chain expired and its place went to another annotator "
            "(or the chain is already fully annotated). Ask for the next chain."
        )
    # The caller may have leased this chain again since; one live lease is enough.
    Assignment.objects.filter(chain=chain, annotator=user, status=AssignmentStatus.ACTIVE).exclude(
        pk=assignment.pk
    ).update(status=AssignmentStatus.EXPIRED)


def assignment_renew(*, assignment_id: int, user: User, now: datetime | None = None) -> Assignment:
    """Extend the caller's lease to ``now + project.lease_duration``.

    Renewing is a heartbeat: it never stacks beyond one lease length from now. An expired
    lease is renewed too while its place is still free; if the place went to another
    annotator this raises LeaseLost. A submitted or skipped lease raises LeaseClosed;
    a lease of someone else raises Assignment.DoesNotExist."""
    now = _now(now)
    with transaction.atomic():
        chain = _lock_own_chain(assignment_id=assignment_id, user=user)
        # Read after the lock: a claim may have just marked this lease EXPIRED.
        assignment = Assignment.objects.get(pk=assignment_id)
        if assignment.status in (AssignmentStatus.SUBMITTED, AssignmentStatus.SKIPPED):
            raise LeaseClosed(f"This lease was already {assignment.status}.")
        if not (assignment.status == AssignmentStatus.ACTIVE and assignment.expires_at > now):
            _take_back_expired(chain=chain, assignment=assignment, user=user, now=now)
        assignment.status = AssignmentStatus.ACTIVE
        assignment.expires_at = now + chain.project.lease_duration
        assignment.save(update_fields=["status", "expires_at"])
        assignment.chain = chain
        return assignment


def assignment_skip(
    *, assignment_id: int, user: User, reason: str, now: datetime | None = None
) -> Assignment:
    """Give the chain back with a reason; the caller is never offered it again.

    Skipping an expired lease still records the choice. Skipping twice is a no-op that
    returns the skipped lease; skipping a submitted lease raises LeaseClosed; a lease of
    someone else raises Assignment.DoesNotExist.

    Holds the chain's row lock, as a submit does, and reads the lease after it: a skip
    and a submit of the same lease are serialized, so the later one sees the other's
    outcome and is refused (LeaseClosed) instead of overwriting it."""
    reason = reason.strip()
    if not reason:
        raise ValidationError({"reason": "Say why you skip this chain."})
    now = _now(now)
    with transaction.atomic():
        chain = _lock_own_chain(assignment_id=assignment_id, user=user)
        assignment = Assignment.objects.get(pk=assignment_id)
        if assignment.status == AssignmentStatus.SKIPPED:
            return assignment
        if assignment.status == AssignmentStatus.SUBMITTED:
            raise LeaseClosed("This lease was already submitted; it cannot be skipped.")
        return _close_as_skipped(chain=chain, assignment=assignment, reason=reason, now=now)


def _close_as_skipped(
    *, chain: Chain, assignment: Assignment, reason: str, now: datetime
) -> Assignment:
    """Close ``assignment`` (ACTIVE or EXPIRED) as SKIPPED with ``reason``.
    Precondition: the chain's row lock is held and the lease was read after it."""
    assignment.status = AssignmentStatus.SKIPPED
    assignment.skip_reason = reason
    assignment.finished_at = now
    assignment.chain_open = not chain.is_finished and not chain.is_gold
    assignment.save(update_fields=["status", "skip_reason", "finished_at", "chain_open"])
    return assignment


def assignment_lock_live(
    *, assignment_id: int, user: User, now: datetime | None = None
) -> tuple[Chain, Assignment]:
    """The chain of the caller's lease ``assignment_id``, locked (``chain.project``
    loaded), and the lease as read after the lock, for an action that only a live lease
    allows (flagging its chain). A submitted or skipped lease raises LeaseClosed, an
    expired one LeaseLost (even while its place is free: ask for the next chain), a lease
    of someone else Assignment.DoesNotExist.

    Precondition: called inside ``transaction.atomic()``; the lock lasts until it ends,
    so the lease stays live for the rest of the transaction."""
    now = _now(now)
    chain = _lock_own_chain(assignment_id=assignment_id, user=user)
    assignment = Assignment.objects.get(pk=assignment_id)
    if assignment.status in (AssignmentStatus.SUBMITTED, AssignmentStatus.SKIPPED):
        raise LeaseClosed(f"This lease was already {assignment.status}.")
    if assignment.status != AssignmentStatus.ACTIVE or assignment.expires_at <= now:
        raise LeaseLost("Your lease on this chain expired. Ask for the next chain.")
    return chain, assignment


def _describe(position: int, step_id: int) -> str:
    return f"step {position} (id {step_id})"


def _validate_submission(
    *, steps: Sequence[tuple[int, int]], ratings: Sequence[RatingInput], mode: str, rewrite: str
) -> None:
    """Raise ValidationError unless ``ratings`` grade ``steps`` (``(id, index)`` pairs in
    step order) as the labeling mode requires.

    * all_steps: every step, exactly once.
    * first_error: every step up to and including the first -1 (all steps if none is -1);
      a rating after the first -1 is refused, since grading stops there (PRM800K).
    * A rewrite is the corrected text of the first incorrect step, so in both modes it
      needs a -1 rating."""
    position = {step_id: pos for pos, (step_id, _index) in enumerate(steps, start=1)}
    errors: list[str] = []
    seen: dict[int, RatingInput] = {}
    for item in ratings:
        if item.step_id not in position:
            errors.append(f"Step id {item.step_id} is not a step of this chain.")
            continue
        where = _describe(position[item.step_id], item.step_id)
        if item.step_id in seen:
            errors.append(f"{where.capitalize()} is rated more than once.")
            continue
        if isinstance(item.rating, bool) or item.rating not in VALID_RATINGS:
            errors.append(f"{where.capitalize()}: a rating is -1, 0 or 1, not {item.rating!r}.")
            continue
        seen[item.step_id] = item
    if errors:
        raise ValidationError({"ratings": errors})

    first_error = next(
        (
            pos
            for step_id, pos in position.items()
            if step_id in seen and seen[step_id].rating == Rating.INCORRECT
        ),
        None,
    )
    if mode == LabelingMode.FIRST_ERROR and first_error is not None:
        beyond = [
            _describe(pos, step_id)
            for step_id, pos in position.items()
            if pos > first_error and step_id in seen
        ]
        if beyond:
            errors.append(
                f"In first_error mode grading stops at the first incorrect step (step "
                f"{first_error}); remove the ratings after it: {', '.join(beyond)}."
            )
        required = [step_id for step_id, pos in position.items() if pos <= first_error]
    else:
        required = list(position)
    missing = [_describe(position[s], s) for s in required if s not in seen]
    if missing:
        if mode == LabelingMode.FIRST_ERROR:
            rule = (
                "In first_error mode every step up to the first incorrect one "
                "(all steps if none is) must be rated"
            )
        else:
            rule = "In all_steps mode every step must be rated"
        errors.append(f"{rule}; missing: {', '.join(missing)}.")
    if errors:
        raise ValidationError({"ratings": errors})
    if rewrite and first_error is None:
        raise ValidationError(
            {
                "rewrite": "A rewrite corrects the first incorrect step: rate a step -1, "
                "or send no rewrite."
            }
        )


def _idempotent_repeat(
    *, annotation: Annotation, assignment_id: int, request_id: str
) -> Annotation:
    if annotation.assignment_id != assignment_id:
        raise LeaseConflict(
            f"request_id {request_id!r} was already used for another submission; "
            "use a new request_id for each submission."
        )
    annotation.created = False  # type: ignore[attr-defined]
    return annotation


def _insert_sql(obj: Model) -> tuple[str, list]:
    """The INSERT of a new ``obj`` (``RETURNING`` its id) and its parameters: what
    ``Model.save()`` sends, field by field (``pre_save`` fills ``auto_now_add``,
    ``get_db_prep_save`` adapts), as plain SQL, since building the ORM's insert cost more
    than running it on every submit."""
    model = type(obj)
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    params = [f.get_db_prep_save(f.pre_save(obj, add=True), connection) for f in fields]
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    sql = (
        f"INSERT INTO {connection.ops.quote_name(model._meta.db_table)} ({columns}) "
        f"VALUES ({', '.join(['%s'] * len(fields))}) RETURNING {model._meta.pk.column}"
    )
    return sql, params


_RATINGS_INSERT = (
    f"INSERT INTO {StepRating._meta.db_table} "
    "(annotation_id, step_id, rating, comment, duration_ms) "
)
# PostgreSQL: the annotation, its ratings, the lease's close and the chain's count in one
# statement (one round trip). The ratings come as four arrays (step ids, ratings, comments,
# durations) zipped by ``unnest``, so the statement's text and parameter count are the
# same for every chain length: psycopg converts and PostgreSQL prepares it once.
_SUBMIT_WRITE_SQL = f"""
    WITH n AS ({{annotation}}),
    r AS (
        {_RATINGS_INSERT}
        SELECT n.id, v.step_id, v.rating, v.comment, v.duration_ms
        FROM n CROSS JOIN unnest(%s::bigint[], %s::smallint[], %s::text[], %s::integer[])
            AS v (step_id, rating, comment, duration_ms)
    ),
    l AS ({_LEASE_SUBMITTED_SQL})
    {{count}}
    SELECT id FROM n
"""
# SQLite takes the rows in batches, far below its limit on bound parameters (32,766).
_RATINGS_PER_STATEMENT = 1_000


def _submit_write(
    *,
    annotation: Annotation,
    ratings: Sequence[RatingInput],
    assignment_id: int,
    now: datetime,
    counted: tuple[int, bool] | None,
) -> None:
    """Store the new ``annotation`` (setting its id) with ``ratings`` (stripped, in step
    order), mark lease ``assignment_id`` SUBMITTED at ``now`` and, unless ``counted`` is
    None, set the chain's ``(finished_count, is_finished)``. The lease's ``chain_open``
    says whether the chain still waits in the queue; the annotation that finishes the
    chain clears it on the chain's other closed leases too.

    Precondition: the chain's row lock is held and the submit was validated; these are
    the writes it decided on. One statement on PostgreSQL, four or more on SQLite."""
    insert_sql, params = _insert_sql(annotation)
    rows = [(r.step_id, r.rating, r.comment, r.duration_ms) for r in ratings]
    finished_at = connection.ops.adapt_datetimefield_value(now)
    # A gold pass (``counted`` None) or the last annotation leaves the chain out of the queue.
    chain_open = counted is not None and not counted[1]
    shuts = counted is not None and counted[1]
    if connection.vendor == "postgresql":
        count_sql = ""
        count_params: list = []
        if counted is not None:
            count_sql = f", c AS ({_CHAIN_COUNTED_SQL})"
            count_params = [*counted, annotation.chain_id]
        if shuts:
            count_sql += f", o AS ({_CHAIN_SHUT_SQL})"
            count_params.append(annotation.chain_id)
        sql = _SUBMIT_WRITE_SQL.format(annotation=insert_sql, count=count_sql)
        params += [list(column) for column in zip(*rows, strict=True)] if rows else [[]] * 4
        params += [finished_at, chain_open, assignment_id, *count_params]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            (annotation.pk,) = cursor.fetchone()
    else:
        with connection.cursor() as cursor:
            cursor.execute(insert_sql, params)
            (annotation.pk,) = cursor.fetchone()
            for start in range(0, len(rows), _RATINGS_PER_STATEMENT):
                batch = rows[start : start + _RATINGS_PER_STATEMENT]
                cursor.execute(
                    f"{_RATINGS_INSERT} VALUES {', '.join(['(%s, %s, %s, %s, %s)'] * len(batch))}",
                    [value for row in batch for value in (annotation.pk, *row)],
                )
            if shuts:
                cursor.execute(_CHAIN_SHUT_SQL, [annotation.chain_id])
            cursor.execute(_LEASE_SUBMITTED_SQL, [finished_at, chain_open, assignment_id])
            if counted is not None:
                cursor.execute(_CHAIN_COUNTED_SQL, [*counted, annotation.chain_id])
    annotation._state.adding = False
    annotation._state.db = connection.alias


def assignment_submit(
    *,
    assignment_id: int,
    user: User,
    ratings: Sequence[RatingInput],
    rewrite: str = "",
    duration_ms: int | None = None,
    request_id: str = "",
    now: datetime | None = None,
) -> Annotation:
    """Record the caller's ratings for the chain leased by ``assignment_id``.

    Creates one human Annotation with a StepRating per graded step, marks the lease
    SUBMITTED and counts the annotation on the chain (``finished_count``, and
    ``is_finished`` once it reaches the overlap), all in one transaction under the chain's
    row lock. Nothing that exists is changed: a correction is a new annotation.

    A repeat with the same non-empty ``request_id`` returns the first annotation and
    changes nothing (the result's ``created`` is False; True on a new annotation). An
    expired lease is accepted while its place is still free, so the work is not lost;
    if its place went to another annotator this raises LeaseLost, and a chain that is
    already full raises LeaseConflict: never a label beyond the overlap. Bad ratings
    raise ValidationError naming the step; someone else's lease raises
    Assignment.DoesNotExist."""
    now = _now(now)
    rewrite = rewrite.strip()
    if len(request_id) > REQUEST_ID_MAX_LENGTH:
        raise ValidationError(
            {"request_id": f"A request_id has at most {REQUEST_ID_MAX_LENGTH} characters."}
        )
    if duration_ms is not None and duration_ms < 0:
        raise ValidationError({"duration_ms": "A duration cannot be negative."})

    with transaction.atomic():
        chain = _lock_own_chain(assignment_id=assignment_id, user=user)
        project = chain.project
        # Read after the lock: a claim may have marked this lease EXPIRED and taken its
        # place, or a concurrent repeat of this very submit may have just committed.
        assignment, steps, earlier = _lease_with_steps(
            assignment_id=assignment_id, user=user, request_id=request_id
        )
        if earlier is not None:
            # Annotations are never edited or deleted, so a hit here is final.
            return _idempotent_repeat(
                annotation=Annotation.objects.get(pk=earlier),
                assignment_id=assignment_id,
                request_id=request_id,
            )
        if assignment.status == AssignmentStatus.SUBMITTED:
            raise LeaseClosed("This lease was already submitted.")
        if assignment.status == AssignmentStatus.SKIPPED:
            raise LeaseClosed("You skipped this chain; its lease is closed.")
        if assignment.status == AssignmentStatus.ACTIVE and assignment.expires_at > now:
            # A live lease holds its place, but the overlap may have been lowered since.
            if chain.finished_count >= project.overlap and not chain.is_gold:
                raise LeaseConflict("This chain already has all the annotations it needs.")
        else:
            _take_back_expired(chain=chain, assignment=assignment, user=user, now=now)

        _validate_submission(
            steps=steps, ratings=ratings, mode=project.labeling_mode, rewrite=rewrite
        )

        annotation = Annotation(
            chain=chain,
            source=AnnotationSource.HUMAN,
            annotator=user,
            assignment=assignment,
            rewrite=rewrite,
            duration_ms=duration_ms,
            request_id=request_id,
        )
        order = {step_id: index for step_id, index in steps}
        rating_rows = [
            RatingInput(
                step_id=item.step_id,
                rating=item.rating,
                comment=item.comment.strip(),
                duration_ms=item.duration_ms,
            )
            for item in sorted(ratings, key=lambda r: order[r.step_id])
        ]
        # finished_count was read under the lock, so it is current. A pass over a gold
        # chain is a test, not real work: it does not count (annotation/services/gold.py).
        counted = None
        if not chain.is_gold:
            finished = chain.finished_count + 1
            counted = (finished, finished >= project.overlap)
        _submit_write(
            annotation=annotation,
            ratings=rating_rows,
            assignment_id=assignment.pk,
            now=now,
            counted=counted,
        )
        assignment.status = AssignmentStatus.SUBMITTED
        assignment.finished_at = now
        assignment.chain_open = counted is not None and not counted[1]
        if counted is not None:
            chain.finished_count, chain.is_finished = counted
        annotation.chain = chain
        annotation.created = True  # type: ignore[attr-defined]
        # The ratings as stored, in step order, so the answer needs no query.
        annotation.rating_rows = rating_rows  # type: ignore[attr-defined]
        return annotation
