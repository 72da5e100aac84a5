"""The labeling queue's services: claim, renew, skip, submit (invariants 1 and 2)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from annotation.labeling.queue.claim import lease_next
from annotation.labeling.queue.errors import LeaseClosed, LeaseConflict, LeaseLost
from annotation.labeling.queue.leases import assignment_renew, assignment_skip
from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.models import (
    Annotation,
    AnnotationSource,
    Assignment,
    AssignmentStatus,
    Chain,
    ImportBatch,
    LabelingMode,
    Membership,
    Project,
    StepRating,
)
from tests.annotation.labeling.claiming import assignment_claim_next
from tests.factories import ChainFactory, ProjectFactory

pytestmark = pytest.mark.django_db

LEASE = timedelta(minutes=30)


def rate_all(chain: Chain, value: int = 1) -> list[RatingInput]:
    return [RatingInput(step_id=s.pk, rating=value) for s in chain.steps.order_by("index")]


def claim(project: Project, user, now: datetime | None = None) -> Assignment:
    assignment = assignment_claim_next(project=project, user=user, now=now)
    assert assignment is not None
    return assignment


def claim_and_submit(project: Project, user, now: datetime | None = None) -> Annotation:
    assignment = claim(project, user, now)
    return assignment_submit(
        assignment_id=assignment.pk, user=user, ratings=rate_all(assignment.chain), now=now
    ).annotation


# --- claim ---------------------------------------------------------------------------------


def test_claim_takes_highest_priority_then_oldest(project, make_member) -> None:
    # Given chains of mixed priority, created in this order
    low = ChainFactory(project=project, priority=0.1)
    high_old = ChainFactory(project=project, priority=0.9)
    high_new = ChainFactory(project=project, priority=0.9)
    users = [make_member(project) for _ in range(4)]

    # When four annotators ask in turn (overlap 1)
    got = [assignment_claim_next(project=project, user=u) for u in users]

    # Then priority wins, then age, and the fourth finds nothing
    assert [a.chain_id if a else None for a in got] == [high_old.pk, high_new.pk, low.pk, None]


def test_claim_returns_the_callers_live_lease_again(project, make_member) -> None:
    ChainFactory.create_batch(3, project=project)
    user = make_member(project)

    first = claim(project, user)
    again = claim(project, user)

    assert again.pk == first.pk
    assert again.expires_at == first.expires_at
    assert Assignment.objects.filter(annotator=user).count() == 1


def test_claim_sets_expiry_from_project_lease_length(make_member) -> None:
    project = ProjectFactory(lease_minutes=7)
    ChainFactory(project=project)
    now = timezone.now()

    assignment = claim(project, make_member(project), now)

    assert assignment.expires_at == now + timedelta(minutes=7)
    assert assignment.status == AssignmentStatus.ACTIVE


def test_overlap_counts_live_leases_and_finished_annotations(make_member) -> None:
    # Given one chain with overlap 2, already annotated once
    project = ProjectFactory(overlap=2)
    chain = ChainFactory(project=project)
    claim_and_submit(project, make_member(project))

    # When a second annotator leases it, a third finds nothing
    second = claim(project, make_member(project))
    third = assignment_claim_next(project=project, user=make_member(project))

    # Then the finished annotation and the live lease fill the two places
    assert second.chain_id == chain.pk
    assert third is None


def test_overlap_allows_that_many_concurrent_leases(make_member) -> None:
    project = ProjectFactory(overlap=3)
    chain = ChainFactory(project=project)
    users = [make_member(project) for _ in range(4)]

    got = [assignment_claim_next(project=project, user=u) for u in users]

    assert [a.chain_id if a else None for a in got] == [chain.pk] * 3 + [None]


def test_a_chain_is_never_leased_twice_to_the_same_annotator(make_member) -> None:
    # Given overlap 2 and an annotator who finished the only chain
    project = ProjectFactory(overlap=2)
    ChainFactory(project=project)
    user = make_member(project)
    claim_and_submit(project, user)

    # When the same annotator asks again, nothing is left for them
    assert assignment_claim_next(project=project, user=user) is None
    # but another annotator still gets the chain
    assert assignment_claim_next(project=project, user=make_member(project)) is not None


def test_a_chain_annotated_by_the_caller_outside_the_queue_is_not_offered(make_member) -> None:
    # Given a human annotation without a lease (e.g. a revision)
    project = ProjectFactory(overlap=3)
    chain = ChainFactory(project=project)
    user = make_member(project)
    Annotation.objects.create(chain=chain, source=AnnotationSource.HUMAN, annotator=user)

    assert assignment_claim_next(project=project, user=user) is None


def test_imported_labels_do_not_take_a_place(make_member) -> None:
    project = ProjectFactory(overlap=1)
    chain = ChainFactory(project=project)
    batch = ImportBatch.objects.create(
        project=project, filename="x.jsonl", format="prm800k", content_hash="0" * 64
    )
    Annotation.objects.create(
        chain=chain, source=AnnotationSource.IMPORT, import_batch=batch, source_name="prm800k"
    )

    assert claim(project, make_member(project)).chain_id == chain.pk


def test_skipped_chain_is_never_offered_to_that_annotator_again(make_member) -> None:
    project = ProjectFactory(overlap=2)
    chain = ChainFactory(project=project)
    user, other = make_member(project), make_member(project)

    lease = claim(project, user)
    skipped = assignment_skip(assignment_id=lease.pk, user=user, reason="unreadable LaTeX")

    assert skipped.status == AssignmentStatus.SKIPPED
    assert skipped.skip_reason == "unreadable LaTeX"
    assert assignment_claim_next(project=project, user=user) is None
    assert claim(project, other).chain_id == chain.pk


def test_flagged_and_finished_chains_are_not_offered(project, make_member) -> None:
    ChainFactory(project=project, is_flagged=True, priority=5)
    ChainFactory(project=project, is_finished=True, finished_count=1, priority=5)
    open_chain = ChainFactory(project=project, priority=0)

    assert claim(project, make_member(project)).chain_id == open_chain.pk
    assert assignment_claim_next(project=project, user=make_member(project)) is None


def test_chains_of_other_projects_are_not_offered(project, make_member) -> None:
    ChainFactory(project=ProjectFactory(), priority=10)

    assert assignment_claim_next(project=project, user=make_member(project)) is None


def test_claim_returns_none_when_the_project_is_empty(project, make_member) -> None:
    assert assignment_claim_next(project=project, user=make_member(project)) is None


def test_an_expired_lease_frees_its_place(project, make_member) -> None:
    # Given a lease that has run out (overlap 1)
    chain = ChainFactory(project=project)
    now = timezone.now()
    first_user, second_user = make_member(project), make_member(project)
    stale = claim(project, first_user, now)
    assert assignment_claim_next(project=project, user=second_user, now=now) is None

    # When another annotator asks after the expiry
    later = now + LEASE + timedelta(seconds=1)
    taken = claim(project, second_user, later)

    # Then the place is theirs and the stale lease is marked EXPIRED
    assert taken.chain_id == chain.pk
    stale.refresh_from_db()
    assert stale.status == AssignmentStatus.EXPIRED


def test_the_caller_gets_the_chain_back_after_their_own_lease_expired(project, make_member) -> None:
    chain = ChainFactory(project=project)
    user = make_member(project)
    now = timezone.now()
    stale = claim(project, user, now)

    # The old ACTIVE row must be closed first: one live lease per annotator and chain.
    again = claim(project, user, now + LEASE * 2)

    assert again.pk != stale.pk
    assert again.chain_id == chain.pk
    assert (
        Assignment.objects.filter(annotator=user, chain=chain, status=AssignmentStatus.ACTIVE).get()
        == again
    )


# --- renew ---------------------------------------------------------------------------------


def test_renew_extends_a_live_lease_from_now(make_member) -> None:
    project = ProjectFactory(lease_minutes=10)
    ChainFactory(project=project)
    user = make_member(project)
    now = timezone.now()
    lease = claim(project, user, now)

    renewed = assignment_renew(assignment_id=lease.pk, user=user, now=now + timedelta(minutes=8))

    assert renewed.expires_at == now + timedelta(minutes=18)
    lease.refresh_from_db()
    assert lease.expires_at == renewed.expires_at


def test_renew_of_an_expired_lease_whose_place_is_free(project, make_member) -> None:
    ChainFactory(project=project)
    user = make_member(project)
    now = timezone.now()
    lease = claim(project, user, now)
    later = now + LEASE * 2

    renewed = assignment_renew(assignment_id=lease.pk, user=user, now=later)

    assert renewed.status == AssignmentStatus.ACTIVE
    assert renewed.expires_at == later + LEASE


def test_renew_of_an_expired_lease_whose_place_was_taken(project, make_member) -> None:
    ChainFactory(project=project)
    user, other = make_member(project), make_member(project)
    now = timezone.now()
    lease = claim(project, user, now)
    later = now + LEASE * 2
    claim(project, other, later)

    with pytest.raises(LeaseLost):
        assignment_renew(assignment_id=lease.pk, user=user, now=later)
    lease.refresh_from_db()
    assert lease.status == AssignmentStatus.EXPIRED


def test_renew_of_a_foreign_or_closed_lease(project, make_member) -> None:
    ChainFactory(project=project)
    user, other = make_member(project), make_member(project)
    lease = claim(project, user)

    with pytest.raises(Assignment.DoesNotExist):
        assignment_renew(assignment_id=lease.pk, user=other)
    assignment_submit(assignment_id=lease.pk, user=user, ratings=rate_all(lease.chain))
    with pytest.raises(LeaseClosed):
        assignment_renew(assignment_id=lease.pk, user=user)


# --- skip ----------------------------------------------------------------------------------


def test_skip_needs_a_reason(project, make_member) -> None:
    ChainFactory(project=project)
    user = make_member(project)
    lease = claim(project, user)

    with pytest.raises(ValidationError) as info:
        assignment_skip(assignment_id=lease.pk, user=user, reason="   ")

    assert "reason" in info.value.message_dict
    lease.refresh_from_db()
    assert lease.status == AssignmentStatus.ACTIVE


def test_skip_of_a_submitted_or_foreign_lease_is_refused(project, make_member) -> None:
    ChainFactory(project=project)
    user, other = make_member(project), make_member(project)
    lease = claim(project, user)

    with pytest.raises(Assignment.DoesNotExist):
        assignment_skip(assignment_id=lease.pk, user=other, reason="mine now")
    assignment_submit(assignment_id=lease.pk, user=user, ratings=rate_all(lease.chain))
    with pytest.raises(LeaseClosed):
        assignment_skip(assignment_id=lease.pk, user=user, reason="changed my mind")


def test_skip_twice_keeps_the_first_reason(project, make_member) -> None:
    ChainFactory(project=project)
    user = make_member(project)
    lease = claim(project, user)

    assignment_skip(assignment_id=lease.pk, user=user, reason="first")
    again = assignment_skip(assignment_id=lease.pk, user=user, reason="second")

    assert again.skip_reason == "first"


# --- submit --------------------------------------------------------------------------------


def test_submit_records_one_annotation_and_counts_it(make_member) -> None:
    # Given overlap 2 and a leased chain of three steps
    project = ProjectFactory(overlap=2)
    chain = ChainFactory(project=project, step_count=3)
    user = make_member(project)
    lease = claim(project, user)
    steps = list(chain.steps.order_by("index"))

    # When the annotator submits
    annotation = assignment_submit(
        assignment_id=lease.pk,
        user=user,
        ratings=[
            RatingInput(step_id=steps[0].pk, rating=1, comment=" fine "),
            RatingInput(step_id=steps[1].pk, rating=0),
            RatingInput(step_id=steps[2].pk, rating=-1),
        ],
        rewrite="3 * 4 = 12",
        duration_ms=4200,
        request_id="req-1",
    )

    # Then one human annotation with three ratings exists and the chain counts it
    assert annotation.created is True
    stored = Annotation.objects.get()
    assert stored.pk == annotation.annotation.pk
    assert (stored.source, stored.annotator, stored.assignment_id) == ("human", user, lease.pk)
    assert (stored.rewrite, stored.duration_ms, stored.request_id) == ("3 * 4 = 12", 4200, "req-1")
    rows = stored.ratings.order_by("step__index").values_list("step_id", "rating", "comment")
    assert list(rows) == [
        (steps[0].pk, 1, "fine"),
        (steps[1].pk, 0, ""),
        (steps[2].pk, -1, ""),
    ]
    lease.refresh_from_db()
    assert lease.status == AssignmentStatus.SUBMITTED
    assert lease.finished_at is not None
    chain.refresh_from_db()
    assert (chain.finished_count, chain.is_finished) == (1, False)

    # And the second annotation finishes the chain
    claim_and_submit(project, make_member(project))
    chain.refresh_from_db()
    assert (chain.finished_count, chain.is_finished) == (2, True)


def test_all_steps_mode_requires_every_step(project, make_member) -> None:
    chain = ChainFactory(project=project, step_count=3)
    user = make_member(project)
    lease = claim(project, user)
    steps = list(chain.steps.order_by("index"))

    with pytest.raises(ValidationError) as info:
        assignment_submit(
            assignment_id=lease.pk,
            user=user,
            ratings=[RatingInput(step_id=steps[0].pk, rating=-1)],
        )

    message = " ".join(info.value.message_dict["ratings"])
    assert "step 2, step 3" in message
    assert not Annotation.objects.exists()


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ("rating", "a rating is -1, 0 or 1, not 2"),
        ("foreign_step", "is not a step of this chain"),
        ("duplicate", "is rated more than once"),
    ],
)
def test_submit_rejects_bad_ratings_naming_the_step(project, make_member, bad, expected) -> None:
    chain = ChainFactory(project=project, step_count=2)
    user = make_member(project)
    lease = claim(project, user)
    ratings = rate_all(chain)
    if bad == "rating":
        ratings[1] = RatingInput(step_id=ratings[1].step_id, rating=2)
    elif bad == "foreign_step":
        other_step = ChainFactory(project=project).steps.first()
        ratings.append(RatingInput(step_id=other_step.pk, rating=1))
    else:
        ratings.append(ratings[0])

    with pytest.raises(ValidationError) as info:
        assignment_submit(assignment_id=lease.pk, user=user, ratings=ratings)

    assert expected in " ".join(info.value.message_dict["ratings"])
    assert not Annotation.objects.exists()
    lease.refresh_from_db()
    assert lease.status == AssignmentStatus.ACTIVE


def test_first_error_mode_stops_at_the_first_incorrect_step(make_member) -> None:
    project = ProjectFactory(labeling_mode=LabelingMode.FIRST_ERROR)
    chain = ChainFactory(project=project, step_count=4)
    user = make_member(project)
    lease = claim(project, user)
    s = list(chain.steps.order_by("index"))

    # Steps after the first -1 are not required ...
    annotation = assignment_submit(
        assignment_id=lease.pk,
        user=user,
        ratings=[RatingInput(s[0].pk, 1), RatingInput(s[1].pk, -1)],
        rewrite="the right second step",
    )

    stored = annotation.annotation.ratings.values_list("step_id", flat=True)
    assert sorted(stored) == [s[0].pk, s[1].pk]


def test_first_error_mode_refuses_ratings_after_the_first_incorrect_step(make_member) -> None:
    project = ProjectFactory(labeling_mode=LabelingMode.FIRST_ERROR)
    chain = ChainFactory(project=project, step_count=4)
    user = make_member(project)
    lease = claim(project, user)
    s = list(chain.steps.order_by("index"))

    with pytest.raises(ValidationError) as info:
        assignment_submit(
            assignment_id=lease.pk,
            user=user,
            ratings=[RatingInput(s[0].pk, 1), RatingInput(s[1].pk, -1), RatingInput(s[3].pk, 1)],
        )

    message = " ".join(info.value.message_dict["ratings"])
    assert "first incorrect step (step 2)" in message
    assert "step 4" in message
    assert not Annotation.objects.exists()


def test_first_error_mode_needs_every_step_before_the_first_error(make_member) -> None:
    project = ProjectFactory(labeling_mode=LabelingMode.FIRST_ERROR)
    chain = ChainFactory(project=project, step_count=3)
    user = make_member(project)
    lease = claim(project, user)
    s = list(chain.steps.order_by("index"))

    # A gap before the first -1, and no -1 at all with a step left out: both refused.
    for ratings in (
        [RatingInput(s[1].pk, -1)],
        [RatingInput(s[0].pk, 1), RatingInput(s[1].pk, 0)],
    ):
        with pytest.raises(ValidationError) as info:
            assignment_submit(assignment_id=lease.pk, user=user, ratings=ratings)
        assert "missing" in " ".join(info.value.message_dict["ratings"])

    assert not Annotation.objects.exists()


@pytest.mark.parametrize("mode", [LabelingMode.ALL_STEPS, LabelingMode.FIRST_ERROR])
def test_a_rewrite_needs_an_incorrect_step(make_member, mode) -> None:
    project = ProjectFactory(labeling_mode=mode)
    chain = ChainFactory(project=project, step_count=2)
    user = make_member(project)
    lease = claim(project, user)

    with pytest.raises(ValidationError) as info:
        assignment_submit(
            assignment_id=lease.pk, user=user, ratings=rate_all(chain), rewrite="better step"
        )

    assert "rewrite" in info.value.message_dict


def test_a_repeated_submit_with_the_same_request_id_changes_nothing(project, make_member) -> None:
    chain = ChainFactory(project=project)
    user = make_member(project)
    lease = claim(project, user)
    first = assignment_submit(
        assignment_id=lease.pk, user=user, ratings=rate_all(chain), request_id="abc"
    )

    # Even with other ratings in the repeat: the first result stands.
    again = assignment_submit(
        assignment_id=lease.pk, user=user, ratings=rate_all(chain, -1), request_id="abc"
    )

    assert again.annotation.pk == first.annotation.pk
    assert again.created is False
    assert Annotation.objects.count() == 1
    assert set(StepRating.objects.values_list("rating", flat=True)) == {1}
    chain.refresh_from_db()
    assert chain.finished_count == 1


def test_a_request_id_reused_for_another_lease_is_a_conflict(make_member) -> None:
    project = ProjectFactory()
    ChainFactory.create_batch(2, project=project)
    user = make_member(project)
    first = claim(project, user)
    assignment_submit(
        assignment_id=first.pk, user=user, ratings=rate_all(first.chain), request_id="same"
    )
    second = claim(project, user)

    with pytest.raises(LeaseConflict, match="already used"):
        assignment_submit(
            assignment_id=second.pk, user=user, ratings=rate_all(second.chain), request_id="same"
        )


def test_a_second_submit_without_request_id_never_edits_the_first(project, make_member) -> None:
    chain = ChainFactory(project=project)
    user = make_member(project)
    lease = claim(project, user)
    first = assignment_submit(
        assignment_id=lease.pk, user=user, ratings=rate_all(chain, 1)
    ).annotation

    with pytest.raises(LeaseClosed):
        assignment_submit(assignment_id=lease.pk, user=user, ratings=rate_all(chain, -1))

    assert list(Annotation.objects.values_list("pk", flat=True)) == [first.pk]
    assert set(first.ratings.values_list("rating", flat=True)) == {1}


def test_submit_for_a_foreign_lease_is_not_found(project, make_member) -> None:
    chain = ChainFactory(project=project)
    owner, intruder = make_member(project), make_member(project)
    lease = claim(project, owner)

    with pytest.raises(Assignment.DoesNotExist):
        assignment_submit(assignment_id=lease.pk, user=intruder, ratings=rate_all(chain))
    with pytest.raises(Assignment.DoesNotExist):
        assignment_submit(assignment_id=10**9, user=owner, ratings=rate_all(chain))
    assert not Annotation.objects.exists()


def test_a_removed_member_can_no_longer_submit(project, make_member) -> None:
    chain = ChainFactory(project=project)
    user = make_member(project)
    lease = claim(project, user)
    Membership.objects.filter(user=user).delete()

    with pytest.raises(Assignment.DoesNotExist):
        assignment_submit(assignment_id=lease.pk, user=user, ratings=rate_all(chain))


def test_submit_of_an_expired_lease_whose_place_was_taken_is_a_conflict(project, make_member):
    # Given a lease that expired and whose place another annotator took (overlap 1)
    chain = ChainFactory(project=project)
    late, other = make_member(project), make_member(project)
    now = timezone.now()
    lease = claim(project, late, now)
    later = now + LEASE * 2
    claim(project, other, later)

    # When the late annotator submits
    with pytest.raises(LeaseLost, match="went to another annotator"):
        assignment_submit(assignment_id=lease.pk, user=late, ratings=rate_all(chain), now=later)

    # Then nothing is recorded beyond the overlap
    assert not Annotation.objects.exists()
    chain.refresh_from_db()
    assert chain.finished_count == 0


def test_submit_of_an_expired_lease_whose_place_is_free_is_accepted(project, make_member):
    chain = ChainFactory(project=project)
    user = make_member(project)
    now = timezone.now()
    lease = claim(project, user, now)

    annotation = assignment_submit(
        assignment_id=lease.pk, user=user, ratings=rate_all(chain), now=now + LEASE * 2
    )

    assert annotation.created is True
    chain.refresh_from_db()
    assert (chain.finished_count, chain.is_finished) == (1, True)


def test_submit_of_an_old_lease_after_leasing_the_chain_again(project, make_member) -> None:
    # Given an expired lease, then a new lease of the same chain by the same annotator
    chain = ChainFactory(project=project)
    user = make_member(project)
    now = timezone.now()
    old = claim(project, user, now)
    later = now + LEASE * 2
    new = claim(project, user, later)

    # When the old lease is submitted, the work counts once and the new lease closes
    assignment_submit(assignment_id=old.pk, user=user, ratings=rate_all(chain), now=later)

    new.refresh_from_db()
    assert new.status == AssignmentStatus.EXPIRED
    assert assignment_claim_next(project=project, user=user, now=later) is None
    with pytest.raises(LeaseConflict):
        assignment_submit(assignment_id=new.pk, user=user, ratings=rate_all(chain), now=later)
    assert Annotation.objects.count() == 1


def test_submit_to_a_chain_that_is_already_full_is_refused(make_member) -> None:
    # Given two leases, then the lead lowers the overlap to 1 and one lease is submitted
    project = ProjectFactory(overlap=2)
    chain = ChainFactory(project=project)
    a, b = make_member(project), make_member(project)
    lease_a, lease_b = claim(project, a), claim(project, b)
    Project.objects.filter(pk=project.pk).update(overlap=1)
    assignment_submit(assignment_id=lease_a.pk, user=a, ratings=rate_all(chain))

    with pytest.raises(LeaseConflict):
        assignment_submit(assignment_id=lease_b.pk, user=b, ratings=rate_all(chain))

    chain.refresh_from_db()
    assert chain.finished_count == 1


def test_a_skipped_lease_cannot_be_submitted(project, make_member) -> None:
    chain = ChainFactory(project=project)
    user = make_member(project)
    lease = claim(project, user)
    assignment_skip(assignment_id=lease.pk, user=user, reason="wrong language")

    with pytest.raises(LeaseClosed):
        assignment_submit(assignment_id=lease.pk, user=user, ratings=rate_all(chain))


# --- query counts (the hot paths) ----------------------------------------------------------
#
# The test runs inside a transaction, so each service's atomic() shows up as a SAVEPOINT and
# a RELEASE SAVEPOINT; in production they are BEGIN/COMMIT, which Django does not log.


def test_claim_query_count_with_a_new_lease(project, make_member, django_assert_num_queries):
    ChainFactory.create_batch(5, project=project)
    user = make_member(project)

    # savepoint, lock user, own live leases?, candidate FOR UPDATE SKIP LOCKED, insert the
    # lease if the fresh re-check passes, release
    with django_assert_num_queries(6):
        lease = lease_next(project=project, user=user)
    assert lease is not None


def test_claim_query_count_with_an_existing_lease(project, make_member, django_assert_num_queries):
    ChainFactory.create_batch(5, project=project)
    user = make_member(project)
    claim(project, user)

    # savepoint, lock user, own live leases, the leased chain (what the lease shows), release
    with django_assert_num_queries(5):
        lease_next(project=project, user=user)


def test_claim_query_count_after_an_expiry(project, make_member, django_assert_num_queries):
    ChainFactory(project=project)
    user = make_member(project)
    now = timezone.now()
    claim(project, make_member(project), now)

    # as with a new lease, but the insert finds a stale lease in the way: the re-check says
    # so, the UPDATE marks it EXPIRED, and the insert runs again (the rare path)
    with django_assert_num_queries(9):
        lease_next(project=project, user=user, now=now + LEASE * 2)


def test_submit_query_count(project, make_member, django_assert_num_queries) -> None:
    chain = ChainFactory(project=project, step_count=12)
    user = make_member(project)
    lease = claim(project, user)
    ratings = rate_all(chain)

    # savepoint, lock chain (+project, and whether it has an active webhook: it has none,
    # so finishing the chain looks for none), the fresh lease with the steps and any
    # earlier use of the request_id, one write (annotation, ratings, lease and chain count
    # in one statement), release
    with django_assert_num_queries(5):
        assignment_submit(assignment_id=lease.pk, user=user, ratings=ratings, request_id="r")


def test_the_candidate_scan_walks_the_queue_index(make_member) -> None:
    # Given a few thousand open chains in two projects, with fresh statistics
    from django.db import connection

    from annotation.labeling.queue import leases
    from annotation.labeling.queue import sql as queue_sql
    from tests.factories import ProblemFactory

    projects = [ProjectFactory(), ProjectFactory()]
    for project in projects:
        problem = ProblemFactory(project=project)
        Chain.objects.bulk_create(
            Chain(project=project, problem=problem, content_hash=f"{i:064d}", priority=i % 97)
            for i in range(3000)
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE annotation_chain")
        user = make_member(projects[0])
        params = leases.sql_params(project=projects[0], user=user, now=timezone.now())
        sql = queue_sql.CANDIDATE_SQL.format(skip="", lock="FOR NO KEY UPDATE OF c SKIP LOCKED")

        # When PostgreSQL plans the claim's candidate query
        cursor.execute("EXPLAIN " + sql, params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    # Then it reads the partial index in queue order instead of sorting the table
    assert "Index Scan using chain_queue_idx" in plan, plan
    assert "Sort" not in plan, plan


# --- a chain a lead asked more labels of (the data manager's requeue) --------------------


def test_a_requeued_chain_is_offered_again_until_its_extra_passes_come_in(
    make_member,
) -> None:
    from annotation.chains.services import chain_requeue
    from annotation.projects.services import project_update

    # Given a finished chain (overlap 1) that a lead asks one more pass of
    project = ProjectFactory(overlap=1)
    chain = ChainFactory(project=project)
    first, second, third = (make_member(project) for _ in range(3))
    claim_and_submit(project, first)
    chain.refresh_from_db()
    assert chain.is_finished
    chain_requeue(chain=chain, more=1)

    # When another annotator asks for the next chain, then submits it
    lease = claim(project, second)
    assert lease.chain_id == chain.pk
    submitted = assignment_submit(assignment_id=lease.pk, user=second, ratings=rate_all(chain))

    # Then the chain counts both passes and is finished again: nobody else is offered it,
    # and the first annotator was never offered it twice
    chain.refresh_from_db()
    assert submitted.created and (chain.finished_count, chain.is_finished) == (2, True)
    assert assignment_claim_next(project=project, user=third) is None
    assert assignment_claim_next(project=project, user=first) is None

    # And a change of the overlap keeps the lead's extra pass in what a chain needs
    project_update(project=project, data={"overlap": 2})
    chain.refresh_from_db()
    assert (chain.extra_labels, chain.is_finished) == (1, False)


def test_a_requeued_chain_takes_as_many_leases_as_passes_asked(make_member) -> None:
    from annotation.chains.services import chain_requeue

    # Given a requeued chain (overlap 1, one more pass asked) leased by two annotators at once
    project = ProjectFactory(overlap=1)
    chain = ChainFactory(project=project)
    first, second, third = (make_member(project) for _ in range(3))
    claim_and_submit(project, first)
    chain_requeue(chain=chain, more=1)
    lease = claim(project, second)

    # Then the place is taken: a third annotator gets nothing while the lease is live
    assert assignment_claim_next(project=project, user=third) is None
    assignment_submit(assignment_id=lease.pk, user=second, ratings=rate_all(chain))
    chain.refresh_from_db()
    assert chain.finished_count == 2
