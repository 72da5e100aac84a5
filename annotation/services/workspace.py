"""Write paths the annotator workspace needs beyond the queue itself: flagging a broken
chain (and a lead clearing the flag), submit-and-next. Leasing, renewing, skipping and
submitting live in ``annotation.queue``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from annotation.models import Assignment, Chain
from annotation.queue.claim import lease_next
from annotation.queue.errors import QueueBusy
from annotation.queue.leases import Lease, assignment_lock_live, assignment_skip
from annotation.queue.submit import RatingInput, Submitted, assignment_submit

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
    a lease is (``annotation.queue``)."""
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


def chain_flag_clear(*, chain: Chain, user: User, now: datetime | None = None) -> Chain:
    """Put a flagged ``chain`` back in the queue, recording that ``user`` (a lead of its
    project: the caller checks) cleared it and when; returns the chain with its flag's
    authors loaded. Who flagged it and why stay, for the record. Clearing a chain that is
    not flagged changes nothing.

    Takes the chain's row lock, so a flag in flight through a live lease commits either
    before (and is cleared) or after (and stands)."""
    now = now if now is not None else timezone.now()
    with transaction.atomic():
        locked = (
            Chain.objects.select_for_update(no_key=True, of=("self",))
            .select_related("flagged_by", "flag_cleared_by")
            .get(pk=chain.pk)
        )
        if not locked.is_flagged:
            return locked
        locked.is_flagged = False
        locked.flag_cleared_by = user
        locked.flag_cleared_at = now
        locked.save(update_fields=["is_flagged", "flag_cleared_by", "flag_cleared_at"])
        return locked


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
) -> SubmitAndNext:
    """``assignment_submit``, then ``lease_next`` in the same project: one
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
