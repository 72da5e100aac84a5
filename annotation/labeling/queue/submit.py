"""Submit a lease's ratings: check them against the chain and the labeling mode, write
the annotation, its ratings, the lease's close and the chain's count together."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import connection, transaction

from annotation.chains.events import chain_labels_changed_notify
from annotation.labeling.queue.errors import LeaseClosed, LeaseConflict
from annotation.labeling.queue.leases import (
    lease_with_steps,
    lock_own_chain_to_submit,
    now_or_current,
    take_back_expired,
)
from annotation.labeling.queue.prelabels import prelabel_outcomes
from annotation.labeling.queue.sql import insert_statement
from annotation.labeling.queue.submit_writes import (
    Standing,
    Writes,
    standing_of,
    submit_writes_run,
)
from annotation.models import (
    Annotation,
    AnnotationSource,
    Assignment,
    AssignmentStatus,
    Chain,
    LabelingMode,
    Rating,
)
from annotation.public_ids import STEP_IDS
from annotation.webhooks.events import (
    chain_finished_payload,
    webhook_chain_finished,
    webhook_deliveries_send_on_commit,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

REQUEST_ID_MAX_LENGTH = Annotation._meta.get_field("request_id").max_length or 100
VALID_RATINGS = frozenset(Rating.values)


@dataclass(frozen=True)
class RatingInput:
    """One step's grade in a submit."""

    step_id: int
    rating: int
    comment: str = ""
    duration_ms: int | None = None


@dataclass(frozen=True, slots=True)
class Submitted:
    """What a submit recorded: the annotation (its ``chain`` loaded, with the project, when
    this call created it), whether this call created it (False: a repeat of an earlier
    ``request_id``, which changed nothing), its ratings in step order and whether it was
    shaped as the pass that finishes its chain (``finishing``: the one that did, or a gold
    pass that writes and sends what such a pass would; what follows a finished chain
    follows it, so that gold costs what real work does)."""

    annotation: Annotation
    created: bool
    ratings: list[RatingInput]
    finishing: bool = False


def _describe(position: int) -> str:
    """A step as messages name it: by its number in the chain, never by its row id (which
    annotators never see: ``annotation.public_ids``)."""
    return f"step {position}"


def submission_validate(
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
    for number, item in enumerate(ratings, start=1):
        if item.step_id not in position:
            errors.append(f"The step of rating {number} is not a step of this chain.")
            continue
        where = _describe(position[item.step_id])
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
            _describe(pos)
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
    missing = [_describe(position[s]) for s in required if s not in seen]
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
    *, annotation_id: int, assignment_id: int, request_id: str, public_step_ids: bool
) -> Submitted:
    """The first submit's record, for a repeat of its ``request_id``."""
    annotation = Annotation.objects.get(pk=annotation_id)
    if annotation.assignment_id != assignment_id:
        raise LeaseConflict(
            f"request_id {request_id!r} was already used for another submission; "
            "use a new request_id for each submission."
        )
    rows = annotation.ratings.order_by("step__index").values_list(
        "step_id", "step__index", "rating", "comment", "duration_ms"
    )
    base = (
        STEP_IDS.base(annotation.chain_id, viewer=annotation.annotator_id) if public_step_ids else 0
    )
    ratings = [
        RatingInput(
            step_id=base + index if public_step_ids else step_id,
            rating=rating,
            comment=comment,
            duration_ms=duration,
        )
        for step_id, index, rating, comment, duration in rows
    ]
    return Submitted(annotation=annotation, created=False, ratings=ratings)


def _submit_write(
    *,
    annotation: Annotation,
    ratings: Sequence[RatingInput],
    outcomes: Sequence[tuple[str, str]],
    assignment_id: int,
    now: datetime,
    standing: Standing,
    hooks_payload: str | None,
) -> tuple[list[int], int]:
    """Store the new ``annotation`` (setting its id) with ``ratings`` (stripped, in step
    order) and their pre-label ``outcomes`` ((outcome, source), one per rating), mark
    lease ``assignment_id`` SUBMITTED at ``now``, and write the chain's count as
    ``standing`` says, with its agreement once two or more passes count. The lease's
    ``chain_open`` says whether the chain still waits in the queue; the annotation that
    finishes the chain clears it on the chain's other closed leases too. With
    ``hooks_payload`` (PostgreSQL), the ``chain.finished`` outbox rows of a chain that
    finished; returns them and how many webhooks take that event.

    Precondition: the chain's row lock is held and the submit was validated; these are
    the writes it decided on. One statement on PostgreSQL, four or more on SQLite."""
    insert_sql, insert_params = insert_statement(annotation)
    writes = Writes(
        chain_id=annotation.chain_id,
        insert_sql=insert_sql,
        insert_params=insert_params,
        rows=[
            (r.step_id, r.rating, r.comment, r.duration_ms, outcome, source)
            for r, (outcome, source) in zip(ratings, outcomes, strict=True)
        ],
        assignment_id=assignment_id,
        finished_at=connection.ops.adapt_datetimefield_value(now),
        standing=standing,
        project_id=annotation.chain.project_id,
        hooks_payload=hooks_payload,
    )
    annotation.pk, sent, hooks = submit_writes_run(writes)
    annotation._state.adding = False
    annotation._state.db = connection.alias
    return sent, hooks


def _check_request(*, request_id: str, duration_ms: int | None) -> None:
    if len(request_id) > REQUEST_ID_MAX_LENGTH:
        raise ValidationError(
            {"request_id": f"A request_id has at most {REQUEST_ID_MAX_LENGTH} characters."}
        )
    if duration_ms is not None and duration_ms < 0:
        raise ValidationError({"duration_ms": "A duration cannot be negative."})


def _hold_place(*, chain: Chain, assignment: Assignment, user: User, now: datetime) -> None:
    """Raise unless the lease may still be submitted: not closed, and either live (on a
    chain that still needs annotations: the overlap may have been lowered since) or
    expired with its place still free (taken back). Precondition: the chain lock is held
    and ``assignment`` was read after it."""
    if assignment.status == AssignmentStatus.SUBMITTED:
        raise LeaseClosed("This lease was already submitted.")
    if assignment.status == AssignmentStatus.SKIPPED:
        raise LeaseClosed("You skipped this chain; its lease is closed.")
    if assignment.status == AssignmentStatus.ACTIVE and assignment.expires_at > now:
        if chain.finished_count >= chain.project.overlap + chain.extra_labels and not chain.is_gold:
            raise LeaseConflict("This chain already has all the annotations it needs.")
    else:
        take_back_expired(chain=chain, assignment=assignment, user=user, now=now)


def ratings_in_step_order(
    *, ratings: Sequence[RatingInput], steps: list[tuple[int, int]]
) -> list[RatingInput]:
    """The ratings as they are stored: in the order of their steps, comments stripped."""
    order = {step_id: index for step_id, index in steps}
    return [
        RatingInput(
            step_id=item.step_id,
            rating=item.rating,
            comment=item.comment.strip(),
            duration_ms=item.duration_ms,
        )
        for item in sorted(ratings, key=lambda r: order[r.step_id])
    ]


def steps_as_named(
    *, chain_id: int, steps: list[tuple[int, int]], viewer: int | None
) -> tuple[list[tuple[int, int]], dict[int, int] | None]:
    """The chain's steps as (the id the caller names them by, index), and, when that is
    their public id (as the user ``viewer`` reads it; None: their row id), the row id of
    each public id (one permutation for the chain)."""
    if viewer is None:
        return steps, None
    base = STEP_IDS.base(chain_id, viewer=viewer)
    return [(base + index, index) for _, index in steps], {
        base + index: row for row, index in steps
    }


def assignment_submit(
    *,
    assignment_id: int,
    user: User,
    ratings: Sequence[RatingInput],
    rewrite: str = "",
    duration_ms: int | None = None,
    request_id: str = "",
    now: datetime | None = None,
    public_step_ids: bool = False,
) -> Submitted:
    """Record the caller's ratings for the chain leased by ``assignment_id``.

    Creates one human Annotation with a StepRating per graded step, marks the lease
    SUBMITTED and counts the annotation on the chain (``finished_count``, and
    ``is_finished`` once it reaches the overlap), all in one transaction under the chain's
    row lock. Nothing that exists is changed: a correction is a new annotation.

    A repeat with the same non-empty ``request_id`` returns the first annotation and
    changes nothing (``Submitted.created`` is False; True on a new annotation). An
    expired lease is accepted while its place is still free, so the work is not lost;
    if its place went to another annotator this raises LeaseLost, and a chain that is
    already full raises LeaseConflict: never a label beyond the overlap. Bad ratings
    raise ValidationError naming the step; someone else's lease raises
    Assignment.DoesNotExist.

    The ratings name steps by their row ids, or with ``public_step_ids`` by their public
    ids (``annotation.public_ids``, as the queue's answers showed them to ``user``), and
    ``Submitted.ratings`` names them the same way."""
    now = now_or_current(now)
    rewrite = rewrite.strip()
    _check_request(request_id=request_id, duration_ms=duration_ms)
    with transaction.atomic():
        chain, webhooks = lock_own_chain_to_submit(assignment_id=assignment_id, user=user)
        project = chain.project
        # Read after the lock: a claim may have marked this lease EXPIRED and taken its
        # place, or a concurrent repeat of this very submit may have just committed.
        assignment, step_rows, earlier = lease_with_steps(
            assignment_id=assignment_id, user=user, request_id=request_id
        )
        if earlier is not None:
            # Annotations are never edited or deleted, so a hit here is final.
            return _idempotent_repeat(
                annotation_id=earlier,
                assignment_id=assignment_id,
                request_id=request_id,
                public_step_ids=public_step_ids,
            )
        steps, row_of = steps_as_named(
            chain_id=chain.pk, steps=step_rows, viewer=user.pk if public_step_ids else None
        )
        _hold_place(chain=chain, assignment=assignment, user=user, now=now)
        submission_validate(
            steps=steps, ratings=ratings, mode=project.labeling_mode, rewrite=rewrite
        )

        in_order = ratings_in_step_order(ratings=ratings, steps=steps)
        return _submit_new(
            chain=chain,
            assignment=assignment,
            ratings=in_order,
            outcomes=prelabel_outcomes(assignment=assignment, ratings=in_order, steps=steps),
            row_of=row_of,
            annotation=Annotation(
                chain=chain,
                source=AnnotationSource.HUMAN,
                annotator=user,
                assignment=assignment,
                rewrite=rewrite,
                duration_ms=duration_ms,
                request_id=request_id,
            ),
            now=now,
            webhooks=webhooks,
        )


def _submit_new(
    *,
    chain: Chain,
    assignment: Assignment,
    ratings: list[RatingInput],
    outcomes: list[tuple[str, str]],
    row_of: dict[int, int] | None,
    annotation: Annotation,
    now: datetime,
    webhooks: bool,
) -> Submitted:
    """Write a validated submit's ``annotation`` with ``ratings`` (in step order, steps
    named as the caller names them; ``row_of`` their row ids when those are public ids)
    and their pre-label ``outcomes`` (``prelabels.prelabel_outcomes``),
    close the lease and count the annotation on the chain; ``webhooks``: whether the
    project has an active webhook to tell of a chain it finishes. Precondition: the
    chain's row lock is held and the submit was validated under it."""
    # finished_count was read under the lock, so it is current.
    standing = standing_of(chain=chain, user_id=assignment.annotator_id)
    # The chain.finished payload is built for a pass shaped as the finishing one, gold
    # included: the statement writes its rows only when the chain did finish.
    in_statement = webhooks and standing.finishing and connection.vendor == "postgresql"
    sent, hooks = _submit_write(
        annotation=annotation,
        ratings=ratings
        if row_of is None
        else [replace(r, step_id=row_of[r.step_id]) for r in ratings],
        outcomes=outcomes,
        assignment_id=assignment.pk,
        now=now,
        standing=standing,
        hooks_payload=chain_finished_payload(chain=chain, passes=standing.count[0], at=now)
        if in_statement
        else None,
    )
    assignment.status = AssignmentStatus.SUBMITTED
    assignment.finished_at = now
    assignment.chain_open = standing.chain_open
    chain.finished_count, chain.is_finished = standing.count
    if in_statement:
        # As many messages for a gold pass as for the real one (``webhooks.events``).
        webhook_deliveries_send_on_commit(ids=sent, messages=hooks)
    elif webhooks and standing.counts and chain.is_finished:
        # In this transaction: a submit rolled back sends nothing (webhooks.events).
        webhook_chain_finished(chain=chain)
    if chain.evaluation_set_id is not None:
        # A lease taken before the chain was held out, submitted after: the set's labels
        # changed, so the figures measured on it are measured again (rare: set chains
        # are never leased afterwards, and the read below runs only here).
        chain_labels_changed_notify(chain_id=chain.pk)
    annotation.chain = chain
    return Submitted(
        annotation=annotation, created=True, ratings=ratings, finishing=standing.finishing
    )
