"""Read paths of an annotator's own history: the chains they submitted in a project,
newest first, and one of them reopened with their ratings.

Only the annotator's own human annotations are read, gold chains among them and looking
exactly like the others: an entry carries nothing but what the annotator sent (ratings,
comments, rewrite) and the chain as the queue showed it, never a chain's status, another
person's label, a consensus or a gold score (``tests/annotation/labeling/test_gold_leakage.py``).

Pages are keyset pages on the annotation id (``annotation.keyset``; ids grow with submit
time, and the cursor survives new submits between two pages): index ``annotation_history`` on
(annotator, id) for human annotations reads one page's rows, whatever the history's
length."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Exists, Min, OuterRef, Q
from django.db.models.functions import Substr
from django.http import Http404

from annotation.access import membership_role
from annotation.first_error import first_error
from annotation.keyset import Keyset, page_cut
from annotation.models import (
    Annotation,
    AnnotationSource,
    Membership,
    Project,
    Rating,
    Role,
    Snapshot,
    Step,
    StepRating,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

HISTORY_PAGE_SIZE = 50
HISTORY_PAGE_SIZE_MAX = 200
# A history page's order: newest pass first, by annotation id.
NEWEST_FIRST = Keyset(descending=True)
# The list shows the problem's first line; a line longer than this is cut with "…".
PROBLEM_LINE_CHARS = 200


@dataclass(frozen=True)
class HistoryEntry:
    """One submitted chain in the list: when, the problem's first line, and a summary of
    the annotator's own ratings. ``first_error`` is the 1-based number of the first step
    they rated −1, or None."""

    annotation_id: int
    chain_id: int
    submitted_at: datetime
    problem_line: str
    step_count: int
    steps_rated: int
    correct: int
    ambiguous: int
    incorrect: int
    first_error: int | None
    comments: int
    rewritten: bool
    revised: bool


@dataclass(frozen=True)
class HistoryPage:
    """``entries`` newest first; ``next_before`` is the cursor of the next (older) page,
    None on the last one."""

    annotator_id: int
    annotator_username: str
    entries: list[HistoryEntry]
    next_before: int | None


@dataclass(frozen=True)
class HistoryStep:
    """A step of a reopened chain with the annotator's own rating (None where they did not
    rate it, e.g. after the first error in first_error mode) and comment."""

    id: int
    index: int
    text: str
    rating: int | None
    comment: str


@dataclass(frozen=True)
class HistoryChain:
    """One submitted chain reopened: the chain as the workspace showed it (the
    reference answer only when the project shows it) and the annotator's pass over it."""

    annotation_id: int
    annotator_id: int
    annotator_username: str
    submitted_at: datetime
    duration_ms: int | None
    labeling_mode: str
    chain_id: int
    problem_text: str
    reference_answer: str | None
    final_answer: str
    steps: list[HistoryStep]
    rewrite: str
    first_error: int | None
    # The revision this one replaced and the one that replaced it (None: none).
    supersedes_id: int | None
    superseded_by_id: int | None
    # Why it can no longer be revised ("" while it can), and whether the caller may.
    closed_reason: str
    can_revise: bool


# Why a pass can no longer be revised, as the history page says it; "" while it can.
CLOSED_REPLACED = "You revised this chain since: this is an earlier version, kept as it was."
CLOSED_SNAPSHOT = (
    "A dataset snapshot was taken after you submitted this, so a dataset may hold these "
    "ratings as they are: ask your lead if one must change."
)
CLOSED_RULED = (
    "A lead has ruled on this chain since you submitted: ask your lead if a rating must change."
)
CLOSED_EVALUATION = (
    "Your lead set this chain apart to measure models on: its labels stay as they are."
)


def revision_closed_reason(*, annotation_id: int) -> str:
    """Why the human pass ``annotation_id`` can no longer be revised, or "" while it can
    (``annotation.labeling.revisions`` has the rule and why it is the same for every
    chain, gold or not). One query."""
    later = OuterRef("created_at")
    row = (
        Annotation.objects.filter(pk=annotation_id)
        .annotate(
            replaced=Exists(Annotation.objects.filter(supersedes=OuterRef("pk"))),
            snapshot=Exists(
                Snapshot.objects.filter(project=OuterRef("chain__project"), created_at__gt=later)
            ),
            ruled=Exists(
                Annotation.objects.filter(
                    chain=OuterRef("chain"),
                    source=AnnotationSource.ADJUDICATION,
                    created_at__gt=later,
                )
            ),
        )
        .values("replaced", "snapshot", "ruled", "chain__evaluation_set")
        .get()
    )
    if row["replaced"]:
        return CLOSED_REPLACED
    if row["chain__evaluation_set"] is not None:
        return CLOSED_EVALUATION
    if row["ruled"]:
        return CLOSED_RULED
    if row["snapshot"]:
        return CLOSED_SNAPSHOT
    return ""


def own_pass_chain_id(*, project: Project, user: User, annotation_id: int) -> int:
    """The chain of ``user``'s own human pass ``annotation_id`` in ``project`` (any of its
    revisions). Raises Http404 for anything else: another person's pass, a lead's
    included, an import or an adjudication, another project's. One query."""
    chain_id = (
        Annotation.objects.filter(
            pk=annotation_id, annotator=user, source=AnnotationSource.HUMAN, chain__project=project
        )
        .values_list("chain_id", flat=True)
        .first()
    )
    if chain_id is None:
        raise Http404("No such annotation in your history.")
    return chain_id


def history_annotator_resolve(*, project: Project, user: User, annotator_id: int | None) -> User:
    """Whose history ``user`` may read in ``project``: their own (``annotator_id`` None or
    their id), or, for the project's leads, any member's.

    Precondition: ``user`` is a member of ``project`` (``project_get_for_member``).
    Raises PermissionDenied when a member who is not a lead names someone else, and
    Http404 when a lead names a user who is not a member."""
    if annotator_id is None or annotator_id == user.pk:
        return user
    if membership_role(user=user, project=project) != Role.LEAD:
        raise PermissionDenied("Only the project's leads read another member's history.")
    member = Membership.objects.filter(project=project, user_id=annotator_id).first()
    if member is None:
        raise Http404("No such member of this project.")
    found: User = get_user_model().objects.get(pk=annotator_id)
    return found


def _first_line(text: str) -> str:
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= PROBLEM_LINE_CHARS else line[: PROBLEM_LINE_CHARS - 1] + "…"


def annotator_history_page(
    *,
    project: Project,
    annotator: User,
    before: int | None = None,
    limit: int = HISTORY_PAGE_SIZE,
) -> HistoryPage:
    """The chains ``annotator`` submitted in ``project``, newest first: ``limit`` of them
    whose annotation id is below ``before`` (the previous page's ``next_before``).

    Two queries whatever the history's length: the page's annotations (one row more than
    ``limit``, to know whether a next page exists) with the chain and the problem's first
    characters, then their ratings summed per annotation."""
    limit = max(1, min(limit, HISTORY_PAGE_SIZE_MAX))
    # The newest revision of each pass: a revised chain is listed once, as revised.
    annotations = Annotation.objects.filter(
        annotator=annotator,
        source=AnnotationSource.HUMAN,
        chain__project=project,
        superseded_by__isnull=True,
    )
    if before is not None:
        annotations = annotations.filter(NEWEST_FIRST.after(value=None, last_id=before))
    read = list(
        annotations.order_by(*NEWEST_FIRST.ordering())
        .annotate(problem_head=Substr("chain__problem__text", 1, PROBLEM_LINE_CHARS * 4))
        .values(
            "pk",
            "chain_id",
            "created_at",
            "problem_head",
            "chain__step_count",
            "rewrite",
            "supersedes_id",
        )[: limit + 1]
    )
    rows, last = page_cut(read, limit=limit)
    sums = {
        row["annotation_id"]: row
        for row in StepRating.objects.filter(annotation_id__in=[row["pk"] for row in rows])
        .values("annotation_id")
        .annotate(
            rated=Count("pk"),
            correct=Count("pk", filter=Q(rating=Rating.CORRECT)),
            ambiguous=Count("pk", filter=Q(rating=Rating.AMBIGUOUS)),
            incorrect=Count("pk", filter=Q(rating=Rating.INCORRECT)),
            first_error=Min("step__index", filter=Q(rating=Rating.INCORRECT)),
            comments=Count("pk", filter=~Q(comment="")),
        )
        .order_by()
    }
    entries = []
    for row in rows:
        summed = sums.get(row["pk"], {})
        first_error = summed.get("first_error")
        entries.append(
            HistoryEntry(
                annotation_id=row["pk"],
                chain_id=row["chain_id"],
                submitted_at=row["created_at"],
                problem_line=_first_line(row["problem_head"]),
                step_count=row["chain__step_count"],
                steps_rated=summed.get("rated", 0),
                correct=summed.get("correct", 0),
                ambiguous=summed.get("ambiguous", 0),
                incorrect=summed.get("incorrect", 0),
                first_error=None if first_error is None else first_error + 1,
                comments=summed.get("comments", 0),
                rewritten=bool(row["rewrite"]),
                revised=row["supersedes_id"] is not None,
            )
        )
    return HistoryPage(
        annotator_id=annotator.pk,
        annotator_username=annotator.get_username(),
        entries=entries,
        next_before=last["pk"] if last is not None else None,
    )


def annotator_history_chain(
    *, project: Project, user: User, annotation_id: int, lead: bool = False
) -> HistoryChain:
    """The submitted chain of annotation ``annotation_id``, reopened read-only: the
    caller's own human annotation in ``project``, or any member's when ``lead``.

    Raises Http404 for anything else (another person's annotation, an import or an
    adjudication, another project's), so an id tells nothing about what it is. An
    earlier revision opens too, read-only. Four queries: the annotation with its chain,
    problem and newer revision, the steps, the ratings, and whether it is still open to
    change (``revision_closed_reason``)."""
    visible = Annotation.objects.filter(
        pk=annotation_id, source=AnnotationSource.HUMAN, chain__project=project
    )
    if not lead:
        visible = visible.filter(annotator=user)
    annotation = visible.select_related("chain__problem", "annotator", "superseded_by").first()
    if annotation is None:
        raise Http404("No such annotation in your history.")
    chain = annotation.chain
    ratings = {
        step_id: (rating, comment)
        for step_id, rating, comment in StepRating.objects.filter(
            annotation=annotation
        ).values_list("step_id", "rating", "comment")
    }
    steps = []
    rows = Step.objects.filter(chain=chain).order_by("index").values_list("pk", "index", "text")
    for step_id, index, text in rows:
        rating, comment = ratings.get(step_id, (None, ""))
        steps.append(
            HistoryStep(id=step_id, index=index, text=text, rating=rating, comment=comment)
        )
    # What the annotator said, read as every labeler's is ("stated"); the entry shows no
    # error (None) for a pass without a -1 as for one that rated nothing.
    stated = first_error([step.rating for step in steps], reading="stated")
    annotator = annotation.annotator
    assert annotator is not None  # a human annotation has its annotator (a check constraint)
    try:
        superseded_by_id: int | None = annotation.superseded_by.pk
    except Annotation.DoesNotExist:
        superseded_by_id = None
    closed_reason = revision_closed_reason(annotation_id=annotation.pk)
    return HistoryChain(
        annotation_id=annotation.pk,
        annotator_id=annotator.pk,
        annotator_username=annotator.get_username(),
        submitted_at=annotation.created_at,
        duration_ms=annotation.duration_ms,
        labeling_mode=project.labeling_mode,
        chain_id=chain.pk,
        problem_text=chain.problem.text,
        reference_answer=chain.problem.reference_answer if project.show_reference_answer else None,
        final_answer=chain.final_answer,
        steps=steps,
        rewrite=annotation.rewrite,
        first_error=None if stated is None or stated < 0 else steps[stated].index + 1,
        supersedes_id=annotation.supersedes_id,
        superseded_by_id=superseded_by_id,
        closed_reason=closed_reason,
        can_revise=not closed_reason and annotator.pk == user.pk,
    )
