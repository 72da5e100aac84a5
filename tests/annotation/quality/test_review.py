"""Review: adjudication as a new revision, its place in consensus, disagreements worst
first, and the label history."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction

from annotation.models import Annotation, AnnotationSource, ImportBatch
from annotation.quality.consensus import chain_consensus, consensus_for_chains
from annotation.quality.review import AdjudicatedRating, adjudication_create
from annotation.quality.review_reads import chain_disagreements, chain_label_history, chain_labels
from annotation.quality.votes import Vote
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings


def human(by: str, *labels: int | None) -> Vote:
    return Vote(by=by, source="human", labels=tuple(labels))


def ruling(by: str, *labels: int | None) -> Vote:
    return Vote(by=f"adjudication:{by}", source="adjudication", labels=tuple(labels))


def _rate(chain, **by_index: int) -> list[AdjudicatedRating]:
    steps = {step.index: step.pk for step in chain.steps.all()}
    return [AdjudicatedRating(steps[int(i[1:])], rating) for i, rating in by_index.items()]


# --- consensus rule 1 ----------------------------------------------------------------


def test_adjudication_wins_on_the_steps_it_rates_with_full_support():
    votes = [human("a", 1, 1, 1), human("b", 1, -1, 1), human("c", 1, -1, 1), ruling("l", None, 1)]

    result = chain_consensus(step_count=3, votes=votes)

    assert result.labels == [1, 1, 1]
    assert result.support == [1.0, 1.0, 1.0]  # step 0 and 2 unanimous; step 1 ruled
    assert [vote.by for vote in result.votes] == ["a", "b", "c", "adjudication:l"]


def test_only_the_newest_adjudication_counts():
    votes = [human("a", 1, 1), ruling("l", -1, -1), ruling("m", None, 0)]

    result = chain_consensus(step_count=2, votes=votes)

    assert result.labels == [1, 0]  # the older ruling's step 0 no longer applies


@pytest.mark.django_db
def test_consensus_from_the_database_takes_the_current_adjudication(project, make_member):
    # Given two annotators tie on step 1 (tie rule: -1) and a lead rules it +1, then
    # another lead re-rules it 0
    lead, other = make_member(project, "lead"), make_member(project, "lead")
    chain = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[1, 1])
    annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[1, -1])
    assert consensus_for_chains(chain_step_counts={chain.pk: 2}, import_labels="fallback")[
        chain.pk
    ].labels == [1, -1]

    first = adjudication_create(chain=chain, lead=lead, ratings=_rate(chain, s1=1), note="ok")
    after_first = consensus_for_chains(chain_step_counts={chain.pk: 2}, import_labels="fallback")
    second = adjudication_create(chain=chain, lead=other, ratings=_rate(chain, s1=0))
    after_second = consensus_for_chains(chain_step_counts={chain.pk: 2}, import_labels="fallback")

    assert after_first[chain.pk].labels == [1, 1]
    assert after_first[chain.pk].support == [1.0, 1.0]
    assert after_second[chain.pk].labels == [1, 0]
    assert second.supersedes_id == first.pk
    assert after_second[chain.pk].votes[-1].by == f"adjudication:{other.username}"


# --- the service ---------------------------------------------------------------------


@pytest.mark.django_db
def test_adjudication_is_a_new_revision_never_an_edit(project, make_member):
    lead = make_member(project, "lead")
    chain = ChainFactory(project=project, step_count=3)
    vote = annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[1, -1, 1])

    first = adjudication_create(
        chain=chain, lead=lead, ratings=_rate(chain, s0=1, s1=1), note="  step 2 is fine  "
    )
    second = adjudication_create(chain=chain, lead=lead, ratings=_rate(chain, s1=0))

    assert first.source == AnnotationSource.ADJUDICATION and first.annotator == lead
    assert first.note == "step 2 is fine"
    assert sorted(first.ratings.values_list("step__index", "rating")) == [(0, 1), (1, 1)]
    first.refresh_from_db()
    assert first.superseded_by == second  # kept, linked, unchanged
    assert sorted(first.ratings.values_list("step__index", "rating")) == [(0, 1), (1, 1)]
    assert list(vote.ratings.order_by("step__index").values_list("rating", flat=True)) == [
        1,
        -1,
        1,
    ]
    chain.refresh_from_db()
    assert chain.finished_count == 0  # a ruling is not an annotator's pass


@pytest.mark.django_db
def test_a_lead_does_not_rule_on_a_dispute_they_labeled_unless_the_project_allows_it(
    project, make_member, client_for
):
    # Given: a lead who labeled the chain themselves, against an annotator
    lead = make_member(project, "lead")
    chain = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=chain, annotator=lead, labels=[1, 1])
    annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[1, -1])
    step = chain.steps.get(index=1)

    # When / Then: their ruling is refused, by the service and by the API, nothing written
    with pytest.raises(PermissionDenied, match="You labeled this chain"):
        adjudication_create(chain=chain, lead=lead, ratings=_rate(chain, s1=1))
    response = client_for(lead).post(
        f"/api/v1/chains/{chain.pk}/adjudicate/",
        {"ratings": [{"step": step.pk, "rating": 1}]},
        format="json",
    )
    assert response.status_code == 403 and "You labeled this chain" in response.json()["detail"]
    assert not Annotation.objects.filter(source=AnnotationSource.ADJUDICATION).exists()
    # ...another lead rules,
    other = make_member(project, "lead")
    adjudication_create(chain=chain, lead=other, ratings=_rate(chain, s1=-1))
    # ...and a project that lets leads rule on their own labels lets them
    project.leads_rule_own_labels = True
    project.save(update_fields=["leads_rule_own_labels"])
    chain.refresh_from_db()
    assert adjudication_create(chain=chain, lead=lead, ratings=_rate(chain, s1=1)).annotator == lead


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("ratings", "field_message"),
    [
        ([], "Rate at least one step"),
        ("other chain", "is not a step of this chain"),
        ("twice", "is rated twice"),
        ("out of range", "is not -1, 0 or 1"),
    ],
)
def test_adjudication_rejects_bad_ratings(project, make_member, ratings, field_message):
    lead = make_member(project, "lead")
    chain = ChainFactory(project=project, step_count=2)
    step = chain.steps.first().pk
    if ratings == "other chain":
        ratings = [AdjudicatedRating(ChainFactory(project=project).steps.first().pk, 1)]
    elif ratings == "twice":
        ratings = [AdjudicatedRating(step, 1), AdjudicatedRating(step, -1)]
    elif ratings == "out of range":
        ratings = [AdjudicatedRating(step, 2)]

    with pytest.raises(ValidationError) as caught:
        adjudication_create(chain=chain, lead=lead, ratings=ratings)

    assert field_message in str(caught.value.message_dict["ratings"])
    assert not Annotation.objects.filter(source=AnnotationSource.ADJUDICATION).exists()


@pytest.mark.django_db
def test_the_database_refuses_an_adjudication_without_a_lead_or_with_an_import(project):
    chain = ChainFactory(project=project)
    batch = ImportBatch.objects.create(project=project, filename="f", format="x", content_hash="h")

    for fields in ({"annotator": None}, {"annotator": UserFactory(), "import_batch": batch}):
        with pytest.raises(IntegrityError), transaction.atomic():
            Annotation.objects.create(chain=chain, source=AnnotationSource.ADJUDICATION, **fields)


# --- selectors -----------------------------------------------------------------------


@pytest.mark.django_db
def test_disagreements_worst_first_and_lone_ratings_are_not_disagreement(
    project, make_member, django_assert_max_num_queries
):
    ann, bob, cid = UserFactory(), UserFactory(), UserFactory()
    calm = ChainFactory(project=project, step_count=3)
    mild = ChainFactory(project=project, step_count=3)
    wild = ChainFactory(project=project, step_count=3)
    clash = ChainFactory(project=project, step_count=3)
    stopped = ChainFactory(project=project, step_count=3)
    for chain, a, b in (
        (calm, [1, 1, 1], [1, 1, 1]),
        (mild, [1, 0, 1], [1, 1, 1]),  # one step, spread 1
        (wild, [1, -1, 1], [1, 1, 1]),  # one step, spread 2
        (clash, [0, -1, 1], [1, 1, 1]),  # two steps
        (stopped, [1, -1], [1, -1, 1]),  # bob's step 2 is alone: no disagreement
    ):
        annotation_with_ratings(chain=chain, annotator=ann, labels=a)
        annotation_with_ratings(chain=chain, annotator=bob, labels=b)
    annotation_with_ratings(chain=clash, annotator=cid, labels=[1, 1, 1])
    adjudication_create(chain=mild, lead=make_member(project, "lead"), ratings=_rate(mild, s1=1))

    # (four: the ratings, the annotators' names, the chains, their rulings' steps)
    with django_assert_max_num_queries(4):
        rows = chain_disagreements(project=project)

    # A ruling resolves its chain: it leaves the list, unless the resolved are asked for
    assert [row.chain_id for row in rows] == [clash.pk, wild.pk]
    rows = chain_disagreements(project=project, include_resolved=True)
    assert [row.chain_id for row in rows] == [clash.pk, wild.pk, mild.pk]
    assert [(r.disagreeing_steps, r.spread, r.annotators) for r in rows] == [
        (2, 3, 3),
        (1, 2, 2),
        (1, 1, 2),
    ]
    assert [row.adjudicated for row in rows] == [False, False, True]
    assert rows[0].by == tuple(sorted([ann.username, bob.username, cid.username]))

    # Filters: the chains one annotator labeled; the chains agreeing on at most a share
    # of their steps (clash agrees on 1 of 3, wild and mild on 2 of 3)
    only_cid = chain_disagreements(project=project, annotator=cid.username)
    assert [row.chain_id for row in only_cid] == [clash.pk]
    worst = chain_disagreements(project=project, max_agreement=0.5)
    assert [(row.chain_id, round(row.agreement, 3)) for row in worst] == [(clash.pk, 0.333)]


def test_a_ruling_resolves_its_chain_only_once_it_rates_every_disputed_step(
    project, make_member, client_for
):
    # Given: a chain whose two annotators disagree on steps 1 and 2 of 3
    lead = make_member(project, "lead")
    ann, bob = UserFactory(), UserFactory()
    chain = ChainFactory(project=project, step_count=3)
    annotation_with_ratings(chain=chain, annotator=ann, labels=[0, -1, 1])
    annotation_with_ratings(chain=chain, annotator=bob, labels=[1, 1, 1])
    url = f"/api/v1/projects/{project.pk}/disagreements/"

    # When: the lead rules on step 2 and on the undisputed step 3 only
    adjudication_create(chain=chain, lead=lead, ratings=_rate(chain, s1=1, s2=1))

    # Then: the chain is not resolved: it stays listed, one of its two disputes ruled
    (row,) = chain_disagreements(project=project)
    assert (row.chain_id, row.adjudicated, row.ruled_steps) == (chain.pk, False, 1)
    listed = client_for(lead).get(url).json()["results"]
    assert [(r["chain"], r["adjudicated"], r["ruled_steps"]) for r in listed] == [
        (chain.pk, False, 1)
    ]

    # When: a newer ruling rates both disputed steps
    adjudication_create(chain=chain, lead=lead, ratings=_rate(chain, s0=1, s1=1))

    # Then: it is resolved, and listed only with the resolved
    assert chain_disagreements(project=project) == []
    (row,) = chain_disagreements(project=project, include_resolved=True)
    assert (row.adjudicated, row.ruled_steps) == (True, 2)


@pytest.mark.django_db
def test_the_disagreements_api_filters_and_refuses_a_bad_filter(project, make_member, client_for):
    lead = make_member(project, "lead")
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    chain = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=chain, annotator=ann, labels=[1, 1])
    annotation_with_ratings(chain=chain, annotator=bob, labels=[1, -1])
    url = f"/api/v1/projects/{project.pk}/disagreements/"
    client = client_for(lead)

    listed = client.get(url, {"annotator": "bob", "max_agreement": 0.5}).json()
    assert [(row["chain"], row["agreement"], row["by"]) for row in listed["results"]] == [
        (chain.pk, 0.5, ["ann", "bob"])
    ]
    assert client.get(url, {"annotator": "nobody"}).json()["count"] == 0
    refused = client.get(url, {"max_agreement": 2})
    assert refused.status_code == 400 and "max_agreement" in refused.json()


@pytest.mark.django_db
def test_label_history_shows_every_revision_with_who_and_when(project, make_member):
    lead = make_member(project, "lead")
    ann = UserFactory(username="ann")
    chain = ChainFactory(project=project, step_count=2)
    imported = annotation_with_ratings(chain=chain, labels=[1, 1])
    old = annotation_with_ratings(chain=chain, annotator=ann, labels=[-1, -1])
    new = annotation_with_ratings(chain=chain, annotator=ann, labels=[1, -1], supersedes=old)
    ruled = adjudication_create(chain=chain, lead=lead, ratings=_rate(chain, s1=1), note="why")

    history = chain_label_history(chain=chain)

    assert [r.annotation_id for r in history] == [imported.pk, old.pk, new.pk, ruled.pk]
    assert [r.by for r in history] == [
        "import:prm800k",
        "ann",
        "ann",
        f"adjudication:{lead.username}",
    ]
    assert [r.current for r in history] == [True, False, True, True]
    assert history[1].superseded_by_id == new.pk and history[2].supersedes_id == old.pk
    assert history[1].ratings == {0: -1, 1: -1}
    assert history[3].note == "why" and history[3].created_at is not None

    labels = chain_labels(chain=chain)
    assert [c.annotation_id for c in labels.columns] == [imported.pk, new.pk, ruled.pk]
    assert [s.ratings for s in labels.steps] == [[1, 1, None], [1, -1, 1]]
    assert [s.consensus for s in labels.steps] == [1, 1]  # import ignored: a person voted
