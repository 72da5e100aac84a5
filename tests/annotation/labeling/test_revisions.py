"""An annotator revises a submitted pass (``annotation.labeling.revisions``): a new
revision that supersedes the old one, counted by consensus and agreement, refused once
the pass is no longer open to change, and serialised with everything else that writes a
chain's passes (real PostgreSQL, real threads)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connections, transaction
from django.http import Http404

from annotation.datasets.evaluation_sets import evaluation_set_mark
from annotation.datasets.snapshots import _snapshots_lock, snapshot_create
from annotation.labeling.history import (
    CLOSED_EVALUATION,
    CLOSED_REPLACED,
    CLOSED_RULED,
    CLOSED_SNAPSHOT,
    annotator_history_chain,
    annotator_history_page,
    revision_closed_reason,
)
from annotation.labeling.queue.errors import RevisionClosed
from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.labeling.revisions import annotation_revise
from annotation.models import Annotation, Chain, LabelingMode, StepRating
from annotation.quality.consensus import consensus_for_chains
from annotation.quality.gold import gold_mark
from annotation.quality.gold_reads import gold_score_for_annotator
from annotation.quality.review import AdjudicatedRating, adjudication_create
from annotation.quality.review_reads import chain_label_history
from tests.annotation.labeling.claiming import assignment_claim_next
from tests.factories import ChainFactory, ProjectFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


def rate(chain: Chain, labels: list[int], comment: str = "") -> list[RatingInput]:
    steps = list(chain.steps.order_by("index"))
    return [
        RatingInput(step_id=step.pk, rating=label, comment=comment)
        for step, label in zip(steps, labels, strict=False)
    ]


def labels_of(annotation: Annotation) -> list[int]:
    return list(annotation.ratings.order_by("step__index").values_list("rating", flat=True))


def test_a_revision_supersedes_the_pass_and_keeps_it(project, make_member):
    # Given: two annotators agree on a chain of overlap 2 (finished, agreement 1.0)
    project.overlap = 2
    project.save()
    ann, bob = make_member(project), make_member(project)
    chain = ChainFactory(project=project)
    mine = annotation_with_ratings(chain=chain, annotator=ann, labels=[1, 1, 1])
    annotation_with_ratings(chain=chain, annotator=bob, labels=[1, 1, 1])
    Chain.objects.filter(pk=chain.pk).update(finished_count=2, is_finished=True, agreement=1.0)

    # When: ann revises step 2 to −1 with a comment and a rewrite
    revision = annotation_revise(
        project=project,
        user=ann,
        annotation_id=mine.pk,
        ratings=rate(chain, [1, -1, 1], comment="  sign slip  "),
        rewrite="  So x = -2.  ",
    )

    # Then: a new revision points at the pass, which keeps its ratings (invariant 1)
    assert revision.supersedes_id == mine.pk and revision.annotator_id == ann.pk
    assert labels_of(revision) == [1, -1, 1] and labels_of(mine) == [1, 1, 1]
    assert revision.rewrite == "So x = -2."
    assert set(revision.ratings.values_list("comment", flat=True)) == {"sign slip"}
    # The lead's history of the chain lists both, the newest current
    history = {row.annotation_id: row for row in chain_label_history(chain=chain)}
    assert not history[mine.pk].current and history[mine.pk].superseded_by_id == revision.pk
    assert history[revision.pk].current
    # Consensus and agreement count the revision; the chain's passes did not move
    chain.refresh_from_db()
    assert (chain.finished_count, chain.is_finished) == (2, True)
    assert chain.agreement == pytest.approx(2 / 3)
    consensus = consensus_for_chains(chain_step_counts={chain.pk: 3}, import_labels="fallback")
    assert consensus[chain.pk].labels[1] == -1  # the lowest of a tie
    # The history lists the chain once, as revised, and the old pass is closed
    page = annotator_history_page(project=project, annotator=ann)
    assert [(e.annotation_id, e.revised, e.incorrect) for e in page.entries] == [
        (revision.pk, True, 1)
    ]
    assert revision_closed_reason(annotation_id=mine.pk) == CLOSED_REPLACED
    assert revision_closed_reason(annotation_id=revision.pk) == ""


def test_an_earlier_revision_is_refused_and_nothing_is_written(project, make_member):
    ann = make_member(project)
    chain = ChainFactory(project=project)
    mine = annotation_with_ratings(chain=chain, annotator=ann, labels=[1, 1, 1])
    annotation_revise(
        project=project, user=ann, annotation_id=mine.pk, ratings=rate(chain, [1, 0, 1])
    )

    # A second tab still showing the first pass cannot overwrite the revision
    with pytest.raises(RevisionClosed) as refused:
        annotation_revise(
            project=project, user=ann, annotation_id=mine.pk, ratings=rate(chain, [-1])
        )
    assert refused.value.message == CLOSED_REPLACED
    assert Annotation.objects.filter(chain=chain).count() == 2


def test_only_the_annotator_revises_their_pass(project, make_member):
    ann, bob, lead = make_member(project), make_member(project), make_member(project, "lead")
    chain = ChainFactory(project=project)
    mine = annotation_with_ratings(chain=chain, annotator=ann, labels=[1, 1, 1])
    imported = annotation_with_ratings(chain=chain, labels=[1, 1, 1])
    elsewhere = ProjectFactory()

    for user, annotation_id, in_project in (
        (bob, mine.pk, project),
        (lead, mine.pk, project),
        (ann, imported.pk, project),
        (ann, mine.pk, elsewhere),
    ):
        with pytest.raises(Http404):
            annotation_revise(
                project=in_project,
                user=user,
                annotation_id=annotation_id,
                ratings=rate(chain, [1, 1, 1]),
            )
    assert Annotation.objects.filter(chain=chain).count() == 2


def test_bad_ratings_are_refused_as_a_submit_would_be(project, make_member):
    project.labeling_mode = LabelingMode.FIRST_ERROR
    project.save()
    ann = make_member(project)
    chain = ChainFactory(project=project)
    mine = annotation_with_ratings(chain=chain, annotator=ann, labels=[1, -1])

    cases = [
        (rate(chain, [1, 1]), "", "missing: step 3"),
        (rate(chain, [-1, 1]), "", "remove the ratings after it"),
        (rate(chain, [1, 1, 1]), "fixed", "A rewrite corrects"),
        ([RatingInput(step_id=10**9, rating=1)], "", "not a step of this chain"),
        (rate(chain, [1, 2, 1]), "", "a rating is -1, 0 or 1"),
    ]
    for ratings, rewrite, message in cases:
        with pytest.raises(ValidationError) as refused:
            annotation_revise(
                project=project, user=ann, annotation_id=mine.pk, ratings=ratings, rewrite=rewrite
            )
        assert message in str(refused.value)
    assert Annotation.objects.filter(chain=chain).count() == 1
    assert revision_closed_reason(annotation_id=mine.pk) == ""


def test_a_snapshot_taken_since_closes_the_pass_and_one_before_does_not(project, make_member):
    # Given: a snapshot taken before ann's pass
    ann, lead = make_member(project), make_member(project, "lead")
    earlier = ChainFactory(project=project)
    annotation_with_ratings(chain=earlier, annotator=lead, labels=[1, 1, 1])
    Chain.objects.filter(pk=earlier.pk).update(finished_count=1, is_finished=True)
    snapshot_create(project=project, user=lead)
    chain = ChainFactory(project=project)
    mine = annotation_with_ratings(chain=chain, annotator=ann, labels=[1, 1, 1])
    assert revision_closed_reason(annotation_id=mine.pk) == ""

    # When: a snapshot is taken after it, whichever chains it holds
    snapshot_create(project=project, user=lead, finished_only=False)

    # Then: the pass is closed and says why
    with pytest.raises(RevisionClosed) as refused:
        annotation_revise(
            project=project, user=ann, annotation_id=mine.pk, ratings=rate(chain, [1, 1, -1])
        )
    assert refused.value.message == CLOSED_SNAPSHOT
    shown = annotator_history_chain(project=project, user=ann, annotation_id=mine.pk)
    assert (shown.can_revise, shown.closed_reason) == (False, CLOSED_SNAPSHOT)


def test_a_ruling_since_the_pass_closes_it(project, make_member):
    project.overlap = 2
    project.save()
    ann, bob, lead = make_member(project), make_member(project), make_member(project, "lead")
    chain = ChainFactory(project=project)
    mine = annotation_with_ratings(chain=chain, annotator=ann, labels=[1, 1, 1])
    annotation_with_ratings(chain=chain, annotator=bob, labels=[1, -1, 1])

    adjudication_create(
        chain=chain,
        lead=lead,
        ratings=[AdjudicatedRating(step_id=chain.steps.all()[1].pk, rating=1)],
    )

    assert revision_closed_reason(annotation_id=mine.pk) == CLOSED_RULED
    with pytest.raises(RevisionClosed):
        annotation_revise(
            project=project, user=ann, annotation_id=mine.pk, ratings=rate(chain, [1, 1, 1])
        )


def test_a_chain_set_apart_for_evaluation_is_closed(project, make_member):
    ann = make_member(project)
    chain = ChainFactory(project=project)
    mine = annotation_with_ratings(chain=chain, annotator=ann, labels=[1, 1, 1])
    imported = annotation_with_ratings(chain=chain, labels=[1, 1, 1])
    Chain.objects.filter(pk=chain.pk).update(import_batch=imported.import_batch)

    evaluation_set_mark(project=project, import_batch_id=imported.import_batch_id, name="held")

    assert revision_closed_reason(annotation_id=mine.pk) == CLOSED_EVALUATION


def test_a_gold_pass_revises_alike_and_its_score_stays_as_submitted(project, make_member):
    """The same rule for a gold chain (its answer key, a ruling made before the pass,
    does not close it) and a gold score that counts the pass as submitted: a revision
    moves nothing an annotator reads differently for gold work."""
    lead, ann = make_member(project, "lead"), make_member(project)
    gold = ChainFactory(project=project)
    adjudication_create(
        chain=gold,
        lead=lead,
        ratings=[AdjudicatedRating(step_id=s.pk, rating=1) for s in gold.steps.all()],
    )
    gold_mark(project=project, chain_ids=[gold.pk])
    mine = annotation_with_ratings(chain=gold, annotator=ann, labels=[1, -1, 1])
    tomorrow = mine.created_at + timedelta(days=1)
    before = gold_score_for_annotator(project=project, user=ann, created_before=tomorrow)
    assert revision_closed_reason(annotation_id=mine.pk) == ""

    revision = annotation_revise(
        project=project, user=ann, annotation_id=mine.pk, ratings=rate(gold, [1, 1, 1])
    )

    after = gold_score_for_annotator(project=project, user=ann, created_before=tomorrow)
    assert before is not None and after == before
    assert before.step_accuracy == pytest.approx(2 / 3)
    gold.refresh_from_db()
    assert (gold.finished_count, gold.agreement) == (0, None)
    assert revision_closed_reason(annotation_id=revision.pk) == ""


# ------------------------------------------------------------------ races


def _in_thread(target, results: list, name: str) -> threading.Thread:
    def run() -> None:
        try:
            results.append((name, target()))
        except BaseException as exc:  # noqa: BLE001  # reported by the test
            results.append((name, exc))
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _a_session_waits_on_a_lock(timeout: float = 30.0) -> bool:
    """Whether, within ``timeout`` seconds, a session of the test database waits on a
    lock (a row's or an advisory one): the revision, blocked by the holder."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with connections["default"].cursor() as cursor:
            # pg_stat_activity is read once a transaction unless the snapshot is dropped.
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            if cursor.fetchone()[0]:
                return True
        time.sleep(0.02)
    return False


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
@pytest.mark.parametrize("holder", ["chain_row", "snapshot"])
def test_a_revision_waits_for_a_finishing_submit_and_a_snapshot(holder):
    """A revision takes the chain's row lock (as a submit that finishes the chain holds
    it) and the shared side of the snapshot lock: while either is held elsewhere it
    waits, then decides on what that writer committed."""
    project = ProjectFactory(overlap=2)
    from tests.factories import MembershipFactory

    ann = MembershipFactory(project=project).user
    chain = ChainFactory(project=project)
    mine = annotation_with_ratings(chain=chain, annotator=ann, labels=[1, 1, 1])
    held, release = threading.Event(), threading.Event()

    def hold() -> str:
        with transaction.atomic():
            if holder == "chain_row":
                Chain.objects.select_for_update(no_key=True).filter(pk=chain.pk).get()
            else:
                _snapshots_lock(project=project)
            held.set()
            release.wait(30)
        return "released"

    results: list = []
    holding = _in_thread(hold, results, "hold")
    assert held.wait(30)
    revising = _in_thread(
        lambda: annotation_revise(
            project=project, user=ann, annotation_id=mine.pk, ratings=rate(chain, [1, 1, -1])
        ),
        results,
        "revise",
    )
    waited = _a_session_waits_on_a_lock() and [name for name, _ in results] == []
    release.set()
    holding.join(30)
    revising.join(30)

    assert waited, results
    assert dict(results)["revise"].supersedes_id == mine.pk


def _race_round() -> None:
    from tests.factories import MembershipFactory

    # Given: overlap 3; ann and cat agree, bob holds the last place
    project = ProjectFactory(overlap=3)
    ann, bob, cat = (MembershipFactory(project=project).user for _ in range(3))
    chain = ChainFactory(project=project)
    mine = annotation_with_ratings(chain=chain, annotator=ann, labels=[1, 1, 1])
    annotation_with_ratings(chain=chain, annotator=cat, labels=[1, 1, 1])
    Chain.objects.filter(pk=chain.pk).update(finished_count=2, agreement=1.0)
    lease = assignment_claim_next(project=project, user=bob)
    assert lease is not None and lease.chain_id == chain.pk
    start = threading.Barrier(2)

    def submit() -> object:
        start.wait(10)
        return assignment_submit(assignment_id=lease.pk, user=bob, ratings=rate(chain, [1, 1, 1]))

    def revise() -> object:
        start.wait(10)
        return annotation_revise(
            project=project, user=ann, annotation_id=mine.pk, ratings=rate(chain, [1, 1, -1])
        )

    # When: bob's finishing submit and ann's revision start at the same instant
    results: list = []
    for thread in [_in_thread(submit, results, "submit"), _in_thread(revise, results, "revise")]:
        thread.join(60)

    # Then: both landed, and the chain's count and agreement count both
    assert not [r for _, r in results if isinstance(r, BaseException)], results
    chain.refresh_from_db()
    assert (chain.finished_count, chain.is_finished) == (3, True)
    assert chain.agreement == pytest.approx(2 / 3)
    assert StepRating.objects.filter(annotation__chain=chain).count() == 12


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(120)
def test_a_revision_racing_the_submit_that_finishes_the_chain_leaves_both_counted():
    for _round in range(5):
        _race_round()
