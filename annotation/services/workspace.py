"""Write paths the annotator workspace needs beyond the queue itself: flagging a broken
chain. Leasing, renewing, skipping and submitting live in ``annotation.services.assignments``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Exists, OuterRef

from annotation.models import Annotation, Assignment, Chain, Membership
from annotation.services.assignments import (
    QueueBusy,
    RatingInput,
    assignment_claim_next,
    assignment_skip,
    assignment_submit,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

FLAG_REASON_PREFIX = "Flagged as broken: "


def chain_flag(*, assignment_id: int, user: User, reason: str) -> Assignment:
    """Flag the chain leased by ``assignment_id`` as broken (garbled text, steps split
    wrongly, a problem that cannot be graded) and give the lease back.

    The chain leaves the queue for everyone (``Chain.is_flagged``; the queue index skips
    flagged chains) until a lead clears the flag; the caller's lease is closed as
    skipped with the reason, prefixed ``FLAG_REASON_PREFIX``, so the lead sees who
    flagged it and why. Flagging a flagged lease again is a no-op; a submitted lease
    raises LeaseClosed and flags nothing; someone else's lease raises
    Assignment.DoesNotExist.

    Lock order follows the queue's protocol (chain row, then assignment row): the
    UPDATE takes the chain's row lock before ``assignment_skip`` locks the lease."""
    reason = reason.strip()
    if not reason:
        raise ValidationError({"reason": "Say what is broken in this chain."})
    owned = Assignment.objects.filter(pk=assignment_id, annotator=user)
    if not user.is_superuser:
        owned = owned.filter(
            Exists(Membership.objects.filter(project=OuterRef("project"), user=user))
        )
    chain_id = owned.values_list("chain_id", flat=True).first()
    if chain_id is None:
        raise Assignment.DoesNotExist("No such assignment.")
    with transaction.atomic():
        Chain.objects.filter(pk=chain_id).update(is_flagged=True)
        # Raises LeaseClosed on a submitted lease, which rolls the flag back with it.
        return assignment_skip(
            assignment_id=assignment_id, user=user, reason=FLAG_REASON_PREFIX + reason
        )


@dataclass(frozen=True)
class SubmitAndNext:
    """A submit's annotation and what the queue gave next: ``next_status`` is "leased"
    (``next_assignment`` is set), "empty" (nothing left) or "busy" (ask again)."""

    annotation: Annotation
    next_assignment: Assignment | None
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
    """``assignment_submit``, then ``assignment_claim_next`` in the same project: one
    round trip for the workspace instead of two, which is most of the wait between
    pressing submit and seeing the next chain.

    Two transactions, in that order: the submit commits before the claim starts, so a
    claim that fails (QueueBusy) never undoes a submit; it is reported as "busy" and the
    caller asks ``next`` again. Errors of the submit propagate exactly as from
    ``assignment_submit``, and nothing is claimed then. A repeated submit (same
    ``request_id``) answers with the caller's live lease, as ``next`` would."""
    annotation = assignment_submit(
        assignment_id=assignment_id,
        user=user,
        ratings=ratings,
        rewrite=rewrite,
        duration_ms=duration_ms,
        request_id=request_id,
    )
    project = annotation.chain.project
    try:
        following = assignment_claim_next(project=project, user=user)
    except QueueBusy:
        return SubmitAndNext(annotation=annotation, next_assignment=None, next_status="busy")
    return SubmitAndNext(
        annotation=annotation,
        next_assignment=following,
        next_status="leased" if following is not None else "empty",
    )
