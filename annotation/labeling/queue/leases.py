"""The caller's own lease: find and lock it, renew it, skip it, take back an expired one
whose place is still free."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone

from annotation.labeling.queue.errors import LeaseClosed, LeaseLost
from annotation.labeling.queue.rows import model_from_row, model_width
from annotation.labeling.queue.sql import (
    ASSIGNMENT_WITH_STEPS_SQL,
    LEASE_CHAIN_SQL,
    LOCK_OWN_CHAIN_SQL,
    MEMBER_SQL,
    PLACE_SQL,
)
from annotation.models import Assignment, AssignmentStatus, Chain, Project
from annotation.quality.gold import gold_place_is_free

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def now_or_current(now: datetime | None) -> datetime:
    return now if now is not None else timezone.now()


def sql_params(*, project: Project, user: User, now: datetime, **extra: object) -> dict:
    return {
        "project": project.pk,
        "user": user.pk,
        "overlap": project.overlap,
        "now": connection.ops.adapt_datetimefield_value(now),
        **extra,
    }


def lock_own_chain(*, assignment_id: int, user: User) -> Chain:
    """Lock the chain of the caller's assignment ``assignment_id``, with ``chain.project``
    loaded.

    A lease of someone else, or of a project the caller no longer belongs to, is reported
    as missing (Assignment.DoesNotExist) so its existence is not revealed. Plain SQL: this
    is half of every submit, and the queryset cost more to build than to run."""
    return lock_own_chain_to_submit(assignment_id=assignment_id, user=user)[0]


def lock_own_chain_to_submit(*, assignment_id: int, user: User) -> tuple[Chain, bool]:
    """``lock_own_chain``'s chain, and whether its project has an active webhook (read in
    the same statement, so a submit that finishes the chain need not look)."""
    lock = "FOR NO KEY UPDATE OF c" if connection.features.has_select_for_update else ""
    member = "" if user.is_superuser else MEMBER_SQL
    sql = LOCK_OWN_CHAIN_SQL.format(member=member, lock=lock)
    with connection.cursor() as cursor:
        cursor.execute(sql, {"assignment": assignment_id, "user": user.pk})
        row = cursor.fetchone()
    if row is None:
        raise Assignment.DoesNotExist("No such assignment.")
    width = model_width(Chain)
    chain = model_from_row(Chain, row[:width])
    chain.project = model_from_row(Project, row[width:-1])
    return chain, bool(row[-1])


def _place_is_free(*, chain: Chain, user: User, now: datetime) -> bool:
    """Whether ``user`` may hold a place on ``chain`` now, not counting the user's own
    leases: the chain is not full and the user has not finished it already.

    Precondition: the chain's row lock is held (so this fresh read is current)."""
    if chain.is_gold:  # no overlap on gold chains: annotation/quality/gold.py
        return gold_place_is_free(chain=chain, user=user)
    params = sql_params(project=chain.project, user=user, now=now, chain=chain.pk)
    with connection.cursor() as cursor:
        cursor.execute(PLACE_SQL, params)
        (free,) = cursor.fetchone()
    return bool(free)


def lease_with_steps(
    *, assignment_id: int, user: User, request_id: str
) -> tuple[Assignment, list[tuple[int, int]], int | None]:
    """The lease ``assignment_id`` as stored now, its chain's steps as (id, index) in
    order, and the id of ``user``'s annotation with ``request_id`` (None if none, or if
    ``request_id`` is empty). Precondition: the chain's row lock is held and the lease is
    ``user``'s (``lock_own_chain``)."""
    params: dict[str, Any] = {
        "assignment": assignment_id,
        "user": user.pk,
        "request_id": request_id,
    }
    with connection.cursor() as cursor:
        cursor.execute(ASSIGNMENT_WITH_STEPS_SQL, params)
        rows = cursor.fetchall()
    width = model_width(Assignment)
    steps = [(row[width], row[width + 1]) for row in rows if row[width] is not None]
    return model_from_row(Assignment, rows[0][:width]), steps, rows[0][width + 2]


def take_back_expired(*, chain: Chain, assignment: Assignment, user: User, now: datetime) -> None:
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
    now = now_or_current(now)
    with transaction.atomic():
        chain = lock_own_chain(assignment_id=assignment_id, user=user)
        # Read after the lock: a claim may have just marked this lease EXPIRED.
        assignment = Assignment.objects.get(pk=assignment_id)
        if assignment.status in (AssignmentStatus.SUBMITTED, AssignmentStatus.SKIPPED):
            raise LeaseClosed(f"This lease was already {assignment.status}.")
        if not (assignment.status == AssignmentStatus.ACTIVE and assignment.expires_at > now):
            take_back_expired(chain=chain, assignment=assignment, user=user, now=now)
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
    now = now_or_current(now)
    with transaction.atomic():
        chain = lock_own_chain(assignment_id=assignment_id, user=user)
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
    now = now_or_current(now)
    chain = lock_own_chain(assignment_id=assignment_id, user=user)
    assignment = Assignment.objects.get(pk=assignment_id)
    if assignment.status in (AssignmentStatus.SUBMITTED, AssignmentStatus.SKIPPED):
        raise LeaseClosed(f"This lease was already {assignment.status}.")
    if assignment.status != AssignmentStatus.ACTIVE or assignment.expires_at <= now:
        raise LeaseLost("Your lease on this chain expired. Ask for the next chain.")
    return chain, assignment


@dataclass(frozen=True, slots=True)
class LeasedStep:
    id: int
    index: int
    text: str


@dataclass(frozen=True, slots=True)
class LeasedChain:
    """What a lease's answer shows of its chain: the problem, the steps in order and the
    final answer (never another annotator's ratings, imported labels or metadata)."""

    problem_text: str
    reference_answer: str
    final_answer: str
    steps: list[LeasedStep]


@dataclass(frozen=True, slots=True)
class Lease:
    """A live lease with the chain it shows: what ``next`` and ``prefetch`` answer with."""

    assignment: Assignment
    chain: LeasedChain


def leased_chain_from_rows(rows: Sequence[Sequence[Any]]) -> LeasedChain:
    """A ``LeasedChain`` from the rows of ``LEASE_CHAIN_SQL`` (or the same columns after a
    new lease's id in ``LEASE_WITH_CHAIN_SQL``): one per step, (step id, index, text,
    final answer, problem text, reference answer); a chain without steps gives one row
    whose step columns are NULL."""
    final_answer, problem_text, reference_answer = rows[0][3:]
    return LeasedChain(
        problem_text=problem_text,
        reference_answer=reference_answer,
        final_answer=final_answer,
        steps=[LeasedStep(row[0], row[1], row[2]) for row in rows if row[0] is not None],
    )


def leased_chain(*, chain_id: int) -> LeasedChain:
    """What a lease on chain ``chain_id`` shows of it; one query."""
    with connection.cursor() as cursor:
        cursor.execute(LEASE_CHAIN_SQL, [chain_id])
        return leased_chain_from_rows(cursor.fetchall())
