"""Consensus per step: majority, the tie rule, superseded revisions, imported labels."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from annotation.models import ImportLabels
from annotation.quality.consensus import chain_consensus, consensus_for_chains
from annotation.quality.votes import Vote, current_votes, step_consensus
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings


def human(by: str, *labels: int | None) -> Vote:
    return Vote(by=by, source="human", labels=tuple(labels))


def imported(*labels: int | None) -> Vote:
    return Vote(by="import:prm800k", source="import", labels=tuple(labels))


# --- the pure rule -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratings", "expected"),
    [
        ([1, 1, -1], (1, 2 / 3)),
        ([0, 0, 0, 1], (0, 0.75)),
        ([1], (1, 1.0)),
        ([1, -1], (-1, 0.5)),  # a tie goes to the lowest rating
        ([1, 0], (0, 0.5)),
        ([1, 0, -1], (-1, 1 / 3)),
        ([1, 1, 0, 0, -1], (0, 0.4)),  # only the tied leaders compete
        ([], (None, None)),
    ],
)
def test_step_consensus_majority_and_tie_rule(ratings, expected):
    assert step_consensus(ratings) == expected


def test_chain_consensus_leaves_steps_nobody_rated_unlabeled():
    # Given two first-error passes that stop at different steps
    votes = [human("a", 1, -1, None, None), human("b", 1, 1, -1, None)]

    # When
    result = chain_consensus(step_count=4, votes=votes)

    # Then: step 1 is a tie (-1 wins), step 2 has one vote, step 3 none
    assert result.labels == [1, -1, -1, None]
    assert result.support == [1.0, 0.5, 1.0, None]


@pytest.mark.parametrize(
    ("mode", "expected_labels", "voters"),
    [
        (ImportLabels.IGNORE, [1, 1], ["a"]),
        (ImportLabels.VOTE, [-1, 1], ["a", "import:prm800k"]),  # 1 vs -1 tie -> -1
        (ImportLabels.FALLBACK, [1, 1], ["a"]),  # a person labeled the chain
    ],
)
def test_chain_consensus_import_labels_with_a_human_vote(mode, expected_labels, voters):
    votes = [human("a", 1, 1), imported(-1, 1)]

    result = chain_consensus(step_count=2, votes=votes, import_labels=mode)

    assert result.labels == expected_labels
    assert [vote.by for vote in result.votes] == voters


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (ImportLabels.IGNORE, [None, None]),
        (ImportLabels.VOTE, [-1, 1]),
        (ImportLabels.FALLBACK, [-1, 1]),
    ],
)
def test_chain_consensus_import_labels_without_a_human_vote(mode, expected):
    result = chain_consensus(step_count=2, votes=[imported(-1, 1)], import_labels=mode)

    assert result.labels == expected
    assert result.has_label is (expected != [None, None])


def test_current_votes_keeps_only_the_newest_pass_per_annotator():
    # Given rows of two passes by user 7 on chain 1 (arriving newest first) and one by 8
    t0 = datetime(2026, 1, 1)
    later = t0 + timedelta(minutes=5)
    rows = [
        (1, 20, "human", "", 7, "ann", later, 0, -1),
        (1, 10, "human", "", 7, "ann", t0, 0, 1),
        (1, 10, "human", "", 7, "ann", t0, 1, 1),
        (1, 20, "human", "", 7, "ann", later, 1, 0),
        (1, 30, "human", "", 8, "bob", t0, 0, 1),
    ]

    # When
    votes = current_votes(rows=rows)

    # Then
    assert votes == {
        1: [
            Vote(by="bob", source="human", labels=(1,), annotation=30),
            Vote(by="ann", source="human", labels=(-1, 0), annotation=20),
        ]
    }


# --- loading from the database -------------------------------------------------------


@pytest.mark.django_db
def test_consensus_for_chains_majority_and_superseded_revision(django_assert_num_queries):
    # Given three annotators on one chain; ann corrects her pass with a new revision
    chain = ChainFactory(step_count=3)
    ann, bob, cat = UserFactory(), UserFactory(), UserFactory()
    first = annotation_with_ratings(chain=chain, annotator=ann, labels=[-1, -1, -1])
    annotation_with_ratings(chain=chain, annotator=ann, labels=[1, 1, 0], supersedes=first)
    annotation_with_ratings(chain=chain, annotator=bob, labels=[1, -1, 0])
    annotation_with_ratings(chain=chain, annotator=cat, labels=[1, 1, -1])
    other = ChainFactory(project=chain.project, step_count=2)

    # When (one query: the votes; the project, given, says majority vote)
    with django_assert_num_queries(1):
        result = consensus_for_chains(
            chain_step_counts={chain.pk: 3, other.pk: 2},
            import_labels=ImportLabels.FALLBACK,
            project=chain.project,
        )

    # Then: the superseded all--1 pass does not count
    assert result[chain.pk].labels == [1, 1, 0]
    assert result[chain.pk].support == [1.0, pytest.approx(2 / 3), pytest.approx(2 / 3)]
    assert sorted(vote.by for vote in result[chain.pk].votes) == sorted(
        [ann.username, bob.username, cat.username]
    )
    assert result[other.pk].labels == [None, None]


@pytest.mark.django_db
def test_consensus_for_chains_falls_back_to_import_labels_per_chain():
    # Given one chain with only imported labels and one with a person's labels as well
    only_import = ChainFactory(step_count=2)
    project = only_import.project
    both = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=only_import, labels=[1, -1])
    annotation_with_ratings(chain=both, labels=[-1, -1])
    annotation_with_ratings(chain=both, annotator=UserFactory(), labels=[1, 1])
    counts = {only_import.pk: 2, both.pk: 2}

    # When / Then
    fallback = consensus_for_chains(chain_step_counts=counts, import_labels="fallback")
    assert fallback[only_import.pk].labels == [1, -1]
    assert fallback[both.pk].labels == [1, 1]
    ignored = consensus_for_chains(chain_step_counts=counts, import_labels="ignore")
    assert ignored[only_import.pk].labels == [None, None]
    voted = consensus_for_chains(chain_step_counts=counts, import_labels="vote")
    assert voted[both.pk].labels == [-1, -1]
