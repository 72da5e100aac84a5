"""Review: a lead's adjudication of a disputed chain.

An adjudication is an Annotation with source "adjudication" (annotator = the lead, a
``note``), never an edit (invariant 1): a later adjudication of the same chain is a new
row whose ``supersedes`` points at the previous one. Consensus takes the current
adjudication's rating on every step it rates (``annotation.quality.consensus``). It is
not an annotator's pass: it does not count toward the overlap, the queue or agreement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from annotation.chains.events import chain_labels_changed_notify
from annotation.models import Annotation, AnnotationSource, Chain, Rating, Step, StepRating

if TYPE_CHECKING:
    from django.contrib.auth.models import User

NOTE_MAX_LENGTH = 10_000


@dataclass(frozen=True, slots=True)
class AdjudicatedRating:
    step_id: int
    rating: int


def adjudication_create(
    *,
    chain: Chain,
    lead: User,
    ratings: Sequence[AdjudicatedRating],
    note: str = "",
) -> Annotation:
    """Record ``lead``'s ruling on ``chain``: a new adjudication annotation with one
    StepRating per entry of ``ratings``, superseding the chain's current adjudication.

    The ruling may rate only the disputed steps; the steps it leaves out keep their
    majority label. A new ruling replaces the previous one whole (it does not merge with
    it), so the reviewer re-states every step they still want to decide.

    The caller checks that ``lead`` leads the chain's project. Raises PermissionDenied when
    ``lead`` labeled the chain themselves and the project does not let leads rule on their
    own labels (``Project.leads_rule_own_labels``); ValidationError for no ratings, a step
    of another chain, a step rated twice or a rating outside -1..1.
    Takes the chain row FOR UPDATE, so two leads adjudicating at once are serialised and
    each supersedes the one before it (``supersedes`` is one-to-one)."""
    if (
        not chain.project.leads_rule_own_labels
        and Annotation.objects.filter(
            chain=chain, source=AnnotationSource.HUMAN, annotator=lead
        ).exists()
    ):
        raise PermissionDenied(
            "You labeled this chain: another lead rules on it (or the project's settings "
            "let leads rule on their own labels)."
        )
    note = note.strip()
    if len(note) > NOTE_MAX_LENGTH:
        raise ValidationError({"note": f"A note has at most {NOTE_MAX_LENGTH} characters."})
    if not ratings:
        raise ValidationError({"ratings": "Rate at least one step."})
    steps = dict(Step.objects.filter(chain=chain).values_list("id", "index"))
    seen: set[int] = set()
    for item in ratings:
        if item.step_id not in steps:
            raise ValidationError({"ratings": f"Step {item.step_id} is not a step of this chain."})
        if item.step_id in seen:
            raise ValidationError({"ratings": f"Step {item.step_id} is rated twice."})
        if item.rating not in Rating.values:
            raise ValidationError({"ratings": f"Rating {item.rating} is not -1, 0 or 1."})
        seen.add(item.step_id)

    with transaction.atomic():
        Chain.objects.select_for_update().filter(pk=chain.pk).values_list("pk").get()
        previous = (
            Annotation.objects.filter(
                chain=chain,
                source=AnnotationSource.ADJUDICATION,
                superseded_by__isnull=True,
            )
            .order_by("-created_at", "-id")
            .first()
        )
        annotation = Annotation.objects.create(
            chain=chain,
            source=AnnotationSource.ADJUDICATION,
            annotator=lead,
            supersedes=previous,
            note=note,
        )
        StepRating.objects.bulk_create(
            StepRating(annotation=annotation, step_id=item.step_id, rating=item.rating)
            for item in sorted(ratings, key=lambda r: steps[r.step_id])
        )
        chain_labels_changed_notify(chain_id=chain.pk)
    return annotation
