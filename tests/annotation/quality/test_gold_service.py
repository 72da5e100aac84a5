"""Gold chains: marking, the queue mix-in, the overlap, screening and gold scores
(annotation/quality/gold.py, annotation/quality/gold_reads.py)."""

from __future__ import annotations

import json
import random
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from annotation.datasets.imports import chain_import
from annotation.labeling.queue.leases import assignment_skip
from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.models import (
    AssignmentStatus,
    Chain,
    LabelingMode,
    Screening,
    ScreeningStatus,
)
from annotation.quality.gold import (
    BLOCKED,
    NORMAL,
    gold_candidate,
    gold_mark,
    gold_mark_from_import,
    gold_unmark,
    screening_reset,
)
from annotation.quality.gold_reads import (
    compare_to_gold,
    gold_order,
    gold_scores,
    screening_state_get,
)
from annotation.quality.review import AdjudicatedRating, adjudication_create
from tests.annotation.labeling.claiming import assignment_claim_next, assignment_prefetch
from tests.factories import ChainFactory, ProjectFactory, UserFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


def make_gold(project, key: list[int | None], step_count: int | None = None) -> Chain:
    """A chain whose import labels are ``key``, marked gold."""
    chain = ChainFactory(project=project, step_count=step_count or len(key))
    annotation_with_ratings(chain=chain, labels=key)
    gold_mark(project=project, chain_ids=[chain.pk])
    chain.refresh_from_db()
    return chain


def shuffled(chains: list[Chain], project, annotator=None) -> list[Chain]:
    """``chains`` in the keyed order the queue offers gold in: the project's own (screening)
    or one annotator's (gold mixed into their work)."""
    order = gold_order(project=project, annotator=annotator)
    return list(Chain.objects.filter(pk__in=[c.pk for c in chains]).order_by(order, "id"))


def ratings(chain: Chain, labels: list[int | None]) -> list[RatingInput]:
    steps = list(chain.steps.order_by("index"))
    return [
        RatingInput(step_id=step.pk, rating=label)
        for step, label in zip(steps, labels, strict=False)
        if label is not None
    ]


def claim_submit(project, user, labels: list[int | None] | None = None, now=None) -> Chain | None:
    """Claim the next chain and submit ``labels`` (default: +1 on every step); the chain
    leased, or None when nothing is left."""
    assignment = assignment_claim_next(project=project, user=user, now=now)
    if assignment is None:
        return None
    chain = assignment.chain
    given = labels if labels is not None else [1] * chain.step_count
    assignment_submit(
        assignment_id=assignment.pk, user=user, ratings=ratings(chain, given), now=now
    )
    return chain


# --- marking ------------------------------------------------------------------------------


def test_mark_by_hand_takes_the_adjudication_else_the_import_labels(project, make_member):
    lead = make_member(project, "lead")
    imported_only = ChainFactory(project=project)
    imported = annotation_with_ratings(chain=imported_only, labels=[1, 1, -1])
    adjudicated = ChainFactory(project=project)
    annotation_with_ratings(chain=adjudicated, labels=[1, 1, 1])
    ruling = adjudication_create(
        chain=adjudicated,
        lead=lead,
        ratings=[AdjudicatedRating(step_id=s.pk, rating=-1) for s in adjudicated.steps.all()],
    )

    gold_mark(project=project, chain_ids=[imported_only.pk, adjudicated.pk])

    imported_only.refresh_from_db()
    adjudicated.refresh_from_db()
    assert (imported_only.is_gold, imported_only.gold_annotation_id) == (True, imported.pk)
    assert (adjudicated.is_gold, adjudicated.gold_annotation_id) == (True, ruling.pk)


def test_marking_is_all_or_nothing_and_names_the_chain_without_labels(project):
    labeled = ChainFactory(project=project)
    annotation_with_ratings(chain=labeled, labels=[1, 1, 1])
    unlabeled = ChainFactory(project=project)
    person_only = ChainFactory(project=project)
    annotation_with_ratings(chain=person_only, annotator=UserFactory(), labels=[1, 1, 1])

    with pytest.raises(ValidationError) as error:
        gold_mark(project=project, chain_ids=[labeled.pk, unlabeled.pk, person_only.pk])

    assert str(unlabeled.pk) in str(error.value) and str(person_only.pk) in str(error.value)
    assert not Chain.objects.filter(is_gold=True).exists()


def test_a_chain_of_another_project_cannot_be_marked(project):
    other = ChainFactory(project=ProjectFactory())
    annotation_with_ratings(chain=other, labels=[1, 1, 1])

    with pytest.raises(ValidationError, match="Not chains of this project"):
        gold_mark(project=project, chain_ids=[other.pk])
    assert not Chain.objects.filter(pk=other.pk, is_gold=True).exists()


def test_mark_from_an_import_takes_every_chain_it_brought_labels_for(project, tmp_path):
    path = tmp_path / "labeled.jsonl"
    records = [
        {"problem": "1 + 1?", "steps": ["It is 2.", "So 2."], "labels": [1, 1]},
        {"problem": "2 + 2?", "steps": ["It is 5.", "So 5."], "labels": [-1, -1]},
        {"problem": "3 + 3?", "steps": ["It is 6.", "So 6."]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    result = chain_import(project=project, path=path, fmt="generic")

    marked = gold_mark_from_import(project=project, import_batch_id=result.batch_id)

    assert len(marked) == 2
    gold = Chain.objects.filter(project=project, is_gold=True)
    assert sorted(c.problem.text for c in gold) == ["1 + 1?", "2 + 2?"]
    assert all(c.gold_annotation.import_batch_id == result.batch_id for c in gold)


def test_mark_from_an_import_without_labels_is_refused(project, tmp_path):
    path = tmp_path / "plain.jsonl"
    path.write_text(json.dumps({"problem": "1 + 1?", "steps": ["2."]}) + "\n")
    result = chain_import(project=project, path=path, fmt="generic")

    with pytest.raises(ValidationError, match="no labels"):
        gold_mark_from_import(project=project, import_batch_id=result.batch_id)


def test_unmark_counts_the_passes_made_while_gold(project, make_member):
    project.overlap = 2
    project.gold_rate = 1.0
    project.save()
    chain = make_gold(project, [1, 1, 1])
    for _ in range(3):
        claim_submit(project, make_member(project))
    chain.refresh_from_db()
    assert (chain.finished_count, chain.is_finished) == (0, False)

    gold_unmark(project=project, chain_ids=[chain.pk])

    chain.refresh_from_db()
    assert (chain.is_gold, chain.gold_annotation_id) == (False, None)
    assert (chain.finished_count, chain.is_finished) == (3, True)


# --- the queue mix-in -------------------------------------------------------------------------


def test_the_normal_queue_never_hands_out_a_gold_chain(project, make_member):
    make_gold(project, [1, 1, 1])

    assert assignment_claim_next(project=project, user=make_member(project)) is None


def test_without_gold_or_screening_the_hook_costs_no_query(
    project, make_member, django_assert_num_queries
):
    make_gold(project, [1, 1, 1])
    user = make_member(project)

    with django_assert_num_queries(0):
        assert gold_candidate(project=project, user=user, now=timezone.now()) == NORMAL


def test_rate_with_a_seeded_source_gives_exactly_the_drawn_share(project, make_member):
    project.gold_rate = 0.5
    user = make_member(project)
    make_gold(project, [1, 1, 1])
    now = timezone.now()
    draws = random.Random(7)
    expected = sum(draws.random() < 0.5 for _ in range(20))
    rng = random.Random(7).random

    picks = [gold_candidate(project=project, user=user, now=now, rng=rng) for _ in range(20)]

    assert 0 < expected < 20
    assert sum(pick.drawn for pick in picks) == expected


def test_rate_half_mixes_some_gold_into_twenty_claims_and_rate_zero_none(project, make_member):
    for _ in range(20):
        ChainFactory(project=project)
    gold = {make_gold(project, [1, 1, 1]).pk for _ in range(20)}
    project.gold_rate = 0.5
    project.overlap = 2
    project.save()
    half = make_member(project)

    leased = [claim_submit(project, half).pk for _ in range(20)]

    got = sum(chain_id in gold for chain_id in leased)
    assert 0 < got < 20
    assert len(set(leased)) == 20  # never the same chain twice
    project.gold_rate = 0.0
    project.save()
    none = make_member(project)
    assert not any(claim_submit(project, none).pk in gold for _ in range(10))


def test_rate_one_gives_every_gold_chain_once_then_real_work(project, make_member):
    project.gold_rate = 1.0
    project.save()
    real = ChainFactory(project=project)
    gold = [make_gold(project, [1, 1, 1]) for _ in range(2)]
    user = make_member(project)

    leased = [claim_submit(project, user) for _ in range(4)]

    gold = shuffled(gold, project, user)
    assert [c.pk if c else None for c in leased] == [gold[0].pk, gold[1].pk, real.pk, None]


def test_gold_ignores_the_overlap_and_is_not_counted(project, make_member):
    project.overlap = 1
    project.gold_rate = 1.0
    project.save()
    gold = make_gold(project, [1, 1, 1])
    real = ChainFactory(project=project)
    first, second = make_member(project), make_member(project)

    assert claim_submit(project, first).pk == gold.pk
    assert claim_submit(project, second).pk == gold.pk  # overlap 1, still offered
    gold.refresh_from_db()
    assert (gold.finished_count, gold.is_finished) == (0, False)
    assert claim_submit(project, first).pk == real.pk
    assert claim_submit(project, second) is None  # the real chain's one place is taken


def test_a_gold_chain_marked_after_it_was_finished_is_still_offered(project, make_member):
    """An adjudicated, fully labeled chain makes a good gold chain."""
    project.gold_rate = 1.0
    project.save()
    lead = make_member(project, "lead")
    chain = ChainFactory(project=project)
    earlier = make_member(project)
    claim_submit(project, earlier)
    adjudication_create(
        chain=chain,
        lead=lead,
        ratings=[AdjudicatedRating(step_id=s.pk, rating=1) for s in chain.steps.all()],
    )
    gold_mark(project=project, chain_ids=[chain.pk])
    late = make_member(project)
    now = timezone.now()
    assignment = assignment_claim_next(project=project, user=late, now=now)
    assert assignment is not None and assignment.chain_id == chain.pk

    # Even after the lease ran out, the pass is accepted: gold has no place to lose.
    later = now + timedelta(hours=2)
    assignment_submit(
        assignment_id=assignment.pk, user=late, ratings=ratings(chain, [1, 1, 1]), now=later
    )
    assert assignment_claim_next(project=project, user=earlier) is None
    chain.refresh_from_db()
    assert chain.finished_count == 1  # the earlier, real pass only


def test_an_expired_gold_lease_is_offered_again_and_a_skipped_one_not(project, make_member):
    project.gold_rate = 1.0
    project.save()
    gold = [make_gold(project, [1, 1, 1]) for _ in range(2)]
    user = make_member(project)
    first, second = shuffled(gold, project, user)
    now = timezone.now()
    lease = assignment_claim_next(project=project, user=user, now=now)
    assert lease.chain_id == first.pk

    again = assignment_claim_next(project=project, user=user, now=now + timedelta(hours=1))
    assert again.chain_id == first.pk and again.pk != lease.pk
    lease.refresh_from_db()
    assert lease.status == AssignmentStatus.EXPIRED

    assignment_skip(assignment_id=again.pk, user=user, reason="unclear")
    assert assignment_claim_next(project=project, user=user).chain_id == second.pk


def test_a_prefetch_gets_another_gold_chain(project, make_member):
    project.gold_rate = 1.0
    project.save()
    gold = [make_gold(project, [1, 1, 1]) for _ in range(2)]
    user = make_member(project)

    current = assignment_claim_next(project=project, user=user)
    prefetched = assignment_prefetch(project=project, user=user)

    gold = shuffled(gold, project, user)
    assert (current.chain_id, prefetched.chain_id) == (gold[0].pk, gold[1].pk)


# --- screening -----------------------------------------------------------------------------


@pytest.fixture
def screened(project):
    """Screening on 2 chains at 75 % step accuracy, 3 gold chains (in the order screening
    offers them), 2 real ones."""
    project.screening_chains = 2
    project.screening_pass_accuracy = 0.75
    project.labeling_mode = LabelingMode.FIRST_ERROR
    project.save()
    gold = [make_gold(project, [1, 1, -1, 1]) for _ in range(3)]
    real = [ChainFactory(project=project, priority=1.0) for _ in range(2)]
    return shuffled(gold, project), real


def test_screening_gives_only_gold_then_passes_to_real_work(project, make_member, screened):
    gold, real = screened
    user = make_member(project)

    assert claim_submit(project, user, [1, 1, -1]).pk == gold[0].pk
    state = screening_state_get(project=project, user=user, now=timezone.now())
    assert (state.status, state.done, state.required) == (ScreeningStatus.PENDING, 1, 2)
    assert claim_submit(project, user, [1, 1, 1, 1]).pk == gold[1].pk  # 6 of 7 steps right

    assert claim_submit(project, user).pk == real[0].pk
    row = Screening.objects.get(project=project, annotator=user)
    assert row.status == ScreeningStatus.PASSED
    assert (row.chains, row.steps_compared, row.steps_correct) == (2, 7, 6)
    assert row.step_accuracy == pytest.approx(6 / 7)


def test_failed_screening_empties_the_queue_until_a_lead_resets_it(project, make_member, screened):
    gold, real = screened
    lead = make_member(project, "lead")
    user = make_member(project)
    claim_submit(project, user, [1, -1])  # 1 of 2 right
    claim_submit(project, user, [1, 1, 1, 1])  # 3 of 4 right: 4 of 6 < 75 %

    assert assignment_claim_next(project=project, user=user) is None
    row = Screening.objects.get(project=project, annotator=user)
    assert (row.status, row.chains) == (ScreeningStatus.FAILED, 2)
    assert row.step_accuracy == pytest.approx(4 / 6)

    screening_reset(project=project, annotator=user, by=lead)
    # A new attempt on the gold chain not seen yet; with no more gold left it is scored
    # on that one.
    assert claim_submit(project, user, [1, 1, -1]).pk == gold[2].pk
    assert claim_submit(project, user).pk == real[0].pk
    row.refresh_from_db()
    assert (row.status, row.chains, row.resets, row.reset_by) == (
        ScreeningStatus.PASSED,
        1,
        1,
        lead,
    )


def test_screening_leases_no_more_gold_than_it_needs(project, make_member, screened):
    gold, _real = screened
    project.screening_chains = 1
    project.save()
    user = make_member(project)

    current = assignment_claim_next(project=project, user=user)

    assert current.chain_id == gold[0].pk
    assert assignment_prefetch(project=project, user=user) is None
    state = screening_state_get(project=project, user=user, now=timezone.now())
    assert (state.status, state.waiting_for_gold) == (ScreeningStatus.PENDING, False)


def test_screening_is_one_set_for_everyone_and_gold_in_work_each_annotator_s_own_order(
    project, make_member
):
    # Given: eight gold chains, and screening on three of them
    gold = [make_gold(project, [1, 1, 1]) for _ in range(8)]
    project.screening_chains = 3
    project.screening_pass_accuracy = 0.0
    project.save()
    first, second = make_member(project), make_member(project)

    # When: both are screened
    screening = [[claim_submit(project, user).pk for _ in range(3)] for user in (first, second)]

    # Then: both got the same three, not the three oldest, in the project's keyed order
    assert screening[0] == screening[1] == [c.pk for c in shuffled(gold, project)[:3]]
    # (the keyed order of all eight is the creation order once in 40,320)
    assert shuffled(gold, project) != gold

    # When: the rest come mixed into their work (every claim gold while gold is left)
    project.screening_chains = 0
    project.gold_rate = 1.0
    project.save()
    rest = [[claim_submit(project, user).pk for _ in range(5)] for user in (first, second)]

    # Then: each gets the other five in an order of their own, keyed by who they are
    left = [c for c in gold if c.pk not in screening[0]]
    assert rest == [[c.pk for c in shuffled(left, project, user)] for user in (first, second)]
    assert shuffled(gold, project, first) != shuffled(gold, project, second)


def test_a_pending_screening_cannot_be_reset(project, make_member, screened):
    with pytest.raises(ValidationError, match="pending"):
        screening_reset(
            project=project, annotator=make_member(project), by=make_member(project, "lead")
        )


def test_screening_without_gold_chains_waits_for_them(project, make_member):
    project.screening_chains = 2
    project.save()
    ChainFactory(project=project)
    user = make_member(project)

    assert gold_candidate(project=project, user=user, now=timezone.now()) == BLOCKED
    assert assignment_claim_next(project=project, user=user) is None
    state = screening_state_get(project=project, user=user, now=timezone.now())
    assert state.waiting_for_gold and state.status == ScreeningStatus.PENDING


def test_leads_and_ml_staff_are_not_screened(project, make_member, screened):
    _gold, real = screened
    project.overlap = 2
    project.save()
    for role in ("lead", "ml"):
        assert claim_submit(project, make_member(project, role)).pk == real[0].pk


# --- scores --------------------------------------------------------------------------------


def test_compare_counts_unrated_steps_as_missing_not_wrong():
    # The annotator stopped at their first error (first_error mode): steps 2 and 3 are
    # missing, not disagreements.
    assert compare_to_gold(gold={0: 1, 1: 1, 2: 1, 3: 1}, mine={0: 1, 1: -1}).steps_compared == 2
    both_clean = compare_to_gold(gold={0: 1, 1: 0}, mine={0: 1, 1: 1})
    assert (both_clean.steps_correct, both_clean.first_error_match) == (1, True)


def test_scores_against_hand_computed_values_in_first_error_mode():
    project = ProjectFactory(labeling_mode=LabelingMode.FIRST_ERROR)
    # G1's key stops at its first error (step 2), as PRM800K's labels do; G2 has none.
    g1 = make_gold(project, [1, 1, -1, None], step_count=4)
    g2 = make_gold(project, [1, 1, 1, 1])
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    # ann: G1 [1, -1] -> 2 compared, 1 right, first error 1 vs 2: no match.
    #      G2 [1, 1, 1, 1] -> 4 compared, 4 right, no error in both: match.
    annotation_with_ratings(chain=g1, annotator=ann, labels=[1, -1])
    annotation_with_ratings(chain=g2, annotator=ann, labels=[1, 1, 1, 1])
    # bob: G1 [1, 1, -1] -> 3 compared, 3 right, match.
    #      G2 as submitted [-1] -> 1 compared, 0 right, error at 0 vs none: no match; his
    #      revision [1, -1] does not count (a gold chain measures the pass as submitted).
    annotation_with_ratings(chain=g1, annotator=bob, labels=[1, 1, -1])
    old = annotation_with_ratings(chain=g2, annotator=bob, labels=[-1])
    annotation_with_ratings(chain=g2, annotator=bob, labels=[1, 1, 1, 1], supersedes=old)
    # A chain that is not gold does not count.
    annotation_with_ratings(chain=ChainFactory(project=project), annotator=ann, labels=[-1])

    scores = {s.username: s for s in gold_scores(project=project)}

    assert (scores["ann"].chains, scores["ann"].steps_compared) == (2, 6)
    assert scores["ann"].step_accuracy == pytest.approx(5 / 6)
    assert scores["ann"].first_error_match == pytest.approx(1 / 2)
    assert (scores["bob"].chains, scores["bob"].steps_compared) == (2, 4)
    assert scores["bob"].step_accuracy == pytest.approx(3 / 4)
    assert scores["bob"].first_error_match == pytest.approx(1 / 2)


def test_progress_leaves_gold_chains_out_so_a_finished_project_reads_100_percent():
    """Gold chains never finish (every annotator labels them); counting them kept a
    project's progress below 100 % for ever, on the project list and the dashboard."""
    from annotation.projects.dashboard import _progress
    from annotation.projects.selectors import project_list_with_progress

    project = ProjectFactory(overlap=1)
    lead = UserFactory(is_superuser=True)
    make_gold(project, [1, 1])
    ordinary = ChainFactory(project=project, step_count=2)
    Chain.objects.filter(pk=ordinary.pk).update(is_finished=True, finished_count=1)

    listed = project_list_with_progress(user=lead).get(pk=project.pk)
    assert (listed.chains_total, listed.chains_finished) == (1, 1)
    assert (listed.annotations_needed, listed.annotations_finished) == (1, 1)
    progress = _progress(project=project)
    assert (progress.chains_total, progress.chains_finished) == (1, 1)
    assert progress.annotations_needed == progress.annotations_finished == 1
