"""An annotator revises a pass they submitted, while it is still open to change.

A revision is a new human Annotation whose ``supersedes`` points at the pass it replaces
(invariant 1): the old ratings stay, listed in the chain's label history for the lead
(``quality.review_reads.chain_label_history``), and consensus, agreement and Dawid-Skene
count the newest (``votes.current_votes``; the fit's stamp moves with the new row).
It takes no lease and is no new pass: ``finished_count`` and the queue do not move. Gold
scores count the pass as submitted (``quality.gold_reads``), so a revision never moves one.

Open to change (``labeling.history.revision_closed_reason``) while:

* it is the annotator's newest revision of the chain (an earlier one stays as it was);
* the chain is in no evaluation set (models were measured on its labels);
* no lead has ruled on the chain since it was submitted (the ruling read it as it was);
* no dataset snapshot of the project, a lead's or a training run's, was taken since.

The same rule for every chain, gold or not, and on facts that move alike for both, so
that nothing an annotator reads moves differently for gold work
(``tests/annotation/labeling/test_gold_leakage.py``). Hence not "until the chain is finished" or
"until a snapshot holds the chain": gold chains never finish and no finished-only
snapshot holds one, while at overlap 1 a real pass finishes its chain at once; a pass
still open long after the others closed would tell gold from real work.

Locks: the shared side of the snapshot lock (``snapshots_hold_off``), then the chain's
row (``FOR NO KEY UPDATE``, as every writer of a chain's passes: a submit that finishes
the chain, an adjudication, another revision), and every check reads after both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction

from annotation.chains.events import chain_labels_changed_notify
from annotation.datasets.snapshots import snapshots_hold_off
from annotation.labeling.history import own_pass_chain_id, revision_closed_reason
from annotation.labeling.queue.errors import RevisionClosed
from annotation.labeling.queue.submit import (
    RatingInput,
    ratings_in_step_order,
    steps_as_named,
    submission_validate,
)
from annotation.models import Annotation, AnnotationSource, Chain, Project, Step, StepRating
from annotation.quality.chain_agreement import chains_agreement_refresh

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def annotation_revise(
    *,
    project: Project,
    user: User,
    annotation_id: int,
    ratings: Sequence[RatingInput],
    rewrite: str = "",
    duration_ms: int | None = None,
    public_step_ids: bool = False,
    rewrite_moved: bool = False,
) -> Annotation:
    """Replace ``user``'s pass ``annotation_id`` in ``project`` with a new revision that
    rates the chain as ``ratings`` say (the whole pass, checked as a submit is: every
    step the labeling mode asks for; a rewrite needs a −1), and return it.

    Raises Http404 unless the annotation is ``user``'s own human pass in ``project``;
    RevisionClosed (with the reason the history page shows) once it is no longer open to
    change, a newer revision of it included, so two tabs cannot overwrite each other;
    ValidationError for bad ratings, naming the step. Steps are named by row id, or by
    public id with ``public_step_ids``. One transaction.

    A rewrite is written for one step, the pass's first −1: a revision that moves the
    first −1 elsewhere and sends the old rewrite unchanged answers ValidationError unless
    ``rewrite_moved`` says the text now belongs to the new first wrong step (the history
    page asks the annotator), so no text lands on a step it was not written for."""
    rewrite = rewrite.strip()
    if duration_ms is not None and duration_ms < 0:
        raise ValidationError({"duration_ms": "A duration cannot be negative."})
    with transaction.atomic():
        snapshots_hold_off(project=project)
        chain_id = own_pass_chain_id(project=project, user=user, annotation_id=annotation_id)
        chain = Chain.objects.select_for_update(no_key=True).get(pk=chain_id)
        # Read after the lock: a revision, ruling or snapshot committed meanwhile counts.
        reason = revision_closed_reason(annotation_id=annotation_id)
        if reason:
            raise RevisionClosed(reason)
        step_rows = list(
            Step.objects.filter(chain_id=chain_id).order_by("index").values_list("pk", "index")
        )
        steps, row_of = steps_as_named(
            chain_id=chain_id, steps=step_rows, viewer=user.pk if public_step_ids else None
        )
        submission_validate(
            steps=steps, ratings=ratings, mode=project.labeling_mode, rewrite=rewrite
        )
        if rewrite and not rewrite_moved:
            _rewrite_stays(
                annotation_id=annotation_id, rewrite=rewrite, ratings=ratings, steps=steps
            )
        revision = Annotation.objects.create(
            chain=chain,
            source=AnnotationSource.HUMAN,
            annotator=user,
            supersedes_id=annotation_id,
            rewrite=rewrite,
            duration_ms=duration_ms,
        )
        StepRating.objects.bulk_create(
            StepRating(
                annotation=revision,
                step_id=item.step_id if row_of is None else row_of[item.step_id],
                rating=item.rating,
                comment=item.comment,
                duration_ms=item.duration_ms,
            )
            for item in ratings_in_step_order(ratings=ratings, steps=steps)
        )
        if not chain.is_gold and chain.finished_count >= 2:
            # The chain's agreement is over its current passes: this one replaced one.
            chains_agreement_refresh(chains=Chain.objects.filter(pk=chain_id))
        chain_labels_changed_notify(chain_id=chain_id)
    return revision


def _rewrite_stays(
    *,
    annotation_id: int,
    rewrite: str,
    ratings: Sequence[RatingInput],
    steps: list[tuple[int, int]],
) -> None:
    """Raise ValidationError when ``rewrite`` is the revised pass's own rewrite and the
    first −1 it was written for is not the first −1 of ``ratings``."""
    earlier = Annotation.objects.get(pk=annotation_id)
    if earlier.rewrite.strip() != rewrite:
        return
    was = (
        earlier.ratings.filter(rating=-1)
        .order_by("step__index")
        .values_list("step__index", flat=True)
        .first()
    )
    index_of = dict(steps)
    now = min((index_of[item.step_id] for item in ratings if item.rating == -1), default=None)
    if was is not None and now is not None and was != now:
        raise ValidationError(
            {
                "rewrite": f"This rewrite was written for step {was + 1}, the first step rated "
                f"-1 in the pass you revise; step {now + 1} is the first now. Leave the "
                f"rewrite out, write one for step {now + 1}, or send rewrite_moved to keep "
                f"this text for step {now + 1}."
            }
        )
