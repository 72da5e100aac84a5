"""Write paths the annotator workspace needs beyond the queue itself: flagging a broken
chain (and a lead clearing the flag), submit-and-next. Leasing, renewing, skipping and
submitting live in ``annotation.labeling.queue``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from annotation.chains.changes import Changed, chain_events_record, chains_lock_sorted
from annotation.labeling.queue.claim import lease_next
from annotation.labeling.queue.errors import QueueBusy
from annotation.labeling.queue.leases import Lease, assignment_lock_live, assignment_skip
from annotation.labeling.queue.submit import RatingInput, Submitted, assignment_submit
from annotation.models import Assignment, BulkAction, Chain, ChainEventKind, Project

if TYPE_CHECKING:
    from django.contrib.auth.models import User

FLAG_REASON_PREFIX = "Flagged as broken: "
FLAG_REASON_MAX_LENGTH = 2_000


def chain_flag(
    *, assignment_id: int, user: User, reason: str, now: datetime | None = None
) -> Assignment:
    """Flag the chain leased by ``assignment_id`` as broken (garbled text, steps split
    wrongly, a problem that cannot be graded) and give the lease back.

    Only a live lease flags: the caller's own, ACTIVE and not expired. A submitted or
    skipped lease (a repeated flag included) raises LeaseClosed, an expired one LeaseLost,
    someone else's Assignment.DoesNotExist; none of them flags anything. So a lease
    that is over can never put back a flag that a lead cleared.

    The chain leaves the queue for everyone (``Chain.is_flagged``; the queue index skips
    flagged chains) until a lead clears the flag (``chain_flag_clear``); the chain keeps
    who flagged it, why and when, and the caller's lease is closed as skipped with the
    reason, prefixed ``FLAG_REASON_PREFIX``. Under the chain's row lock, as every change of
    a lease is (``annotation.labeling.queue``)."""
    reason = reason.strip()
    if not reason:
        raise ValidationError({"reason": "Say what is broken in this chain."})
    if len(reason) > FLAG_REASON_MAX_LENGTH:
        raise ValidationError(
            {"reason": f"A reason has at most {FLAG_REASON_MAX_LENGTH} characters."}
        )
    now = now if now is not None else timezone.now()
    with transaction.atomic():
        chain, _lease = assignment_lock_live(assignment_id=assignment_id, user=user, now=now)
        Chain.objects.filter(pk=chain.pk).update(
            is_flagged=True,
            flagged_by=user,
            flag_reason=reason,
            flagged_at=now,
            flag_cleared_by=None,
            flag_cleared_at=None,
        )
        return assignment_skip(
            assignment_id=assignment_id, user=user, reason=FLAG_REASON_PREFIX + reason, now=now
        )


def chain_flag_by_lead(
    *, chain: Chain, user: User, reason: str, now: datetime | None = None
) -> Chain:
    """Take ``chain`` out of the queue as broken on a lead's word, with no lease (the
    admin's action): recorded as a flag by ``user`` (a lead of its project, or staff: the
    caller checks) with ``reason``. Leases held on it run out as they would."""
    reason = reason.strip()
    if not reason:
        raise ValidationError({"reason": "Say what is broken in this chain."})
    now = now if now is not None else timezone.now()
    with transaction.atomic():
        locked = Chain.objects.select_for_update(no_key=True).get(pk=chain.pk)
        locked.is_flagged = True
        locked.flagged_by = user
        locked.flag_reason = reason[:FLAG_REASON_MAX_LENGTH]
        locked.flagged_at = now
        locked.flag_cleared_by = None
        locked.flag_cleared_at = None
        locked.save(
            update_fields=[
                "is_flagged",
                "flagged_by",
                "flag_reason",
                "flagged_at",
                "flag_cleared_by",
                "flag_cleared_at",
            ]
        )
        return locked


NOT_FLAGGED = "not flagged"


def flag_clear_reasons() -> dict[str, Q]:
    """Why ``chains_flag_clear`` leaves a chain as it is."""
    return {NOT_FLAGGED: Q(is_flagged=False)}


def chains_flag_clear(
    *,
    project: Project,
    chain_ids: Iterable[int],
    user: User,
    now: datetime | None = None,
    bulk_action: BulkAction | None = None,
) -> Changed:
    """Put flagged chains back in the queue, recording that ``user`` (a lead of the
    project: the caller checks) cleared each flag and when, in the chain and its history.
    Who flagged it and why stay, for the record. Chains that are not flagged are left.

    Under the chains' row locks, so a flag in flight through a live lease commits either
    before (and is cleared) or after (and stands)."""
    now = now if now is not None else timezone.now()
    with transaction.atomic():
        outcome = chains_lock_sorted(
            project=project, chain_ids=chain_ids, reasons=flag_clear_reasons()
        )
        reasons = dict(
            Chain.objects.filter(pk__in=outcome.changed).values_list("pk", "flag_reason")
        )
        Chain.objects.filter(pk__in=outcome.changed).update(
            is_flagged=False, flag_cleared_by=user, flag_cleared_at=now
        )
        chain_events_record(
            chain_ids=outcome.changed,
            kind=ChainEventKind.UNFLAGGED,
            actor=user,
            now=now,
            detail=lambda chain_id: {"flag_reason": reasons[chain_id]},
            bulk_action=bulk_action,
        )
    return outcome


def chain_flag_clear(*, chain: Chain, user: User, now: datetime | None = None) -> Chain:
    """``chains_flag_clear`` for one chain; returns it with its flag's authors loaded.
    Clearing a chain that is not flagged changes nothing."""
    with transaction.atomic():
        chains_flag_clear(project=chain.project, chain_ids=[chain.pk], user=user, now=now)
        return Chain.objects.select_related("flagged_by", "flag_cleared_by").get(pk=chain.pk)


@dataclass(frozen=True)
class SubmitAndNext:
    """What a submit recorded and what the queue gave next: ``next_status`` is "leased"
    (``next_lease`` is set), "empty" (nothing left) or "busy" (ask again)."""

    submitted: Submitted
    next_lease: Lease | None
    next_status: str


def assignment_submit_and_claim_next(
    *,
    assignment_id: int,
    user: User,
    ratings: Sequence[RatingInput],
    rewrite: str = "",
    duration_ms: int | None = None,
    request_id: str = "",
    public_step_ids: bool = False,
) -> SubmitAndNext:
    """``assignment_submit`` (``public_step_ids`` as there), then ``lease_next`` in the
    same project: one
    round trip for the workspace instead of two, which is most of the wait between
    pressing submit and seeing the next chain.

    Two transactions, in that order: the submit commits before the claim starts, so a
    claim that fails (QueueBusy) never undoes a submit; it is reported as "busy" and the
    caller asks ``next`` again. Errors of the submit propagate exactly as from
    ``assignment_submit``, and nothing is claimed then. A repeated submit (same
    ``request_id``) answers with the caller's live lease, as ``next`` would."""
    submitted = assignment_submit(
        assignment_id=assignment_id,
        user=user,
        ratings=ratings,
        rewrite=rewrite,
        duration_ms=duration_ms,
        request_id=request_id,
        public_step_ids=public_step_ids,
    )
    project = submitted.annotation.chain.project
    try:
        following = lease_next(project=project, user=user)
    except QueueBusy:
        return SubmitAndNext(submitted=submitted, next_lease=None, next_status="busy")
    return SubmitAndNext(
        submitted=submitted,
        next_lease=following,
        next_status="leased" if following is not None else "empty",
    )
