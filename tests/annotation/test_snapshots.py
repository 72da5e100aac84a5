"""Snapshots: counts, versions, content hash, immutability, the problem-level split, and
streaming their examples."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from annotation.models import SnapshotChain
from annotation.selectors.datasets import snapshot_examples, snapshot_get, snapshot_list
from annotation.services.snapshots import problem_split, snapshot_create
from tests.factories import ChainFactory, ProblemFactory, UserFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


def _labeled_chain(project, labels, *, annotator=None, problem=None):
    chain = ChainFactory(
        project=project, step_count=len(labels), **({"problem": problem} if problem else {})
    )
    annotation_with_ratings(chain=chain, annotator=annotator or UserFactory(), labels=labels)
    return chain


def test_snapshot_create_counts_and_rows(project):
    # Given two labeled chains, one partly labeled, and an unlabeled one
    lead = UserFactory()
    full = _labeled_chain(project, [1, 0, -1])
    partial = _labeled_chain(project, [1, -1, None])
    ChainFactory(project=project)

    # When
    snapshot = snapshot_create(project=project, user=lead, heldout_fraction=0.0)

    # Then
    assert snapshot.version == 1
    assert snapshot.created_by == lead
    assert snapshot.counts == {
        "chains": 2,
        "steps_labeled": 5,
        "train_chains": 2,
        "heldout_chains": 0,
        "problems": 2,
        "label_counts": {"-1": 2, "0": 1, "1": 2},
    }
    assert snapshot.meta["trl_ambiguous"] == "drop"
    assert snapshot.meta["consensus"]["import_labels"] == "fallback"
    rows = {row.chain_id: row for row in SnapshotChain.objects.filter(snapshot=snapshot)}
    assert set(rows) == {full.pk, partial.pk}
    assert rows[partial.pk].labels == [1, -1, None]
    assert rows[partial.pk].support == [1.0, 1.0, None]
    assert rows[full.pk].votes[0]["labels"] == [1, 0, -1]
    assert len(snapshot.content_hash) == 64


def test_snapshot_without_new_labels_has_same_hash_and_next_version(project):
    # Given a snapshot
    chain = _labeled_chain(project, [1, 1, 1])
    first = snapshot_create(project=project)

    # When a second one is taken with nothing new
    second = snapshot_create(project=project)

    # Then it is a new version with the same content hash
    assert (first.version, second.version) == (1, 2)
    assert second.content_hash == first.content_hash

    # And when a new label changes the consensus, the next hash differs
    annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[1, 1, -1])
    third = snapshot_create(project=project)
    assert third.version == 3
    assert third.content_hash != first.content_hash


def test_snapshot_rows_do_not_change_when_labels_change_later(project):
    # Given a snapshot of one chain
    chain = _labeled_chain(project, [1, 1, 1])
    snapshot = snapshot_create(project=project)

    # When two more annotators disagree afterwards
    for _ in range(2):
        annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[-1, -1, -1])
    newer = snapshot_create(project=project)

    # Then the old snapshot still holds what it froze
    old_row = SnapshotChain.objects.get(snapshot=snapshot)
    assert old_row.labels == [1, 1, 1]
    assert SnapshotChain.objects.get(snapshot=newer).labels == [-1, -1, -1]


def test_snapshot_hash_does_not_depend_on_ids_or_voters(project):
    # Given the same labels from different people, in another project, made in reverse order
    from tests.factories import ProjectFactory

    other = ProjectFactory()
    specs = [("What is 1+1?", [1, -1]), ("What is 2+2?", [1, 1]), ("What is 3+3?", [0, 1])]
    for target, order in ((project, specs), (other, list(reversed(specs)))):
        for text, labels in order:
            problem = ProblemFactory(project=target, text=text, content_hash=f"p-{text}")
            chain = ChainFactory(
                project=target, problem=problem, step_count=2, content_hash=f"c-{text}"
            )
            annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=labels)

    # When
    ours = snapshot_create(project=project, seed=3, heldout_fraction=0.5)
    theirs = snapshot_create(project=other, seed=3, heldout_fraction=0.5)

    # Then
    assert ours.content_hash == theirs.content_hash
    assert snapshot_create(project=project, seed=4, heldout_fraction=0.5).counts["chains"] == 3


def test_split_is_by_problem_and_deterministic(project):
    # Given 40 problems with 3 labeled chains each
    for _ in range(40):
        problem = ProblemFactory(project=project)
        for _ in range(3):
            _labeled_chain(project, [1, -1], problem=problem)

    # When
    snapshot = snapshot_create(project=project, heldout_fraction=0.3, seed=7)
    again = snapshot_create(project=project, heldout_fraction=0.3, seed=7)
    reseeded = snapshot_create(project=project, heldout_fraction=0.3, seed=8)

    # Then no problem is in both splits, both splits are used, and the split is stable
    def splits(snap):
        return set(
            SnapshotChain.objects.filter(snapshot=snap).values_list("chain__problem_id", "split")
        )

    by_problem: dict[int, set[str]] = {}
    for problem_id, split in splits(snapshot):
        by_problem.setdefault(problem_id, set()).add(split)
    assert all(len(found) == 1 for found in by_problem.values())
    heldout = sum(found == {"heldout"} for found in by_problem.values())
    assert 0 < heldout < 40
    assert snapshot.counts["heldout_chains"] == 3 * heldout
    assert splits(again) == splits(snapshot)
    assert again.content_hash == snapshot.content_hash
    assert splits(reseeded) != splits(snapshot)


def test_problem_split_fraction_is_roughly_honoured():
    heldout = sum(
        problem_split(problem_hash=f"{i:064x}", seed=0, heldout_fraction=0.2) == "heldout"
        for i in range(5000)
    )
    assert 800 < heldout < 1200


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_snapshot_create_rejects_bad_fraction(project, fraction):
    _labeled_chain(project, [1])
    with pytest.raises(ValidationError):
        snapshot_create(project=project, heldout_fraction=fraction)


def test_snapshot_create_refuses_a_project_without_labels(project):
    ChainFactory(project=project)
    with pytest.raises(ValidationError, match="no labeled step"):
        snapshot_create(project=project)
    assert not snapshot_list(project=project).exists()


def test_snapshot_examples_streams_chunks_with_steps_in_order(project, django_assert_num_queries):
    # Given 5 labeled chains
    chains = [_labeled_chain(project, [1, 1, -1]) for _ in range(5)]
    snapshot = snapshot_create(project=project, heldout_fraction=0.0)

    # When read two at a time: 3 chunks of 2 queries, and one query that finds the end
    with django_assert_num_queries(7):
        examples = list(snapshot_examples(snapshot=snapshot, chunk_size=2))

    # Then every chain comes once, with its problem and ordered steps
    assert sorted(example.chain_id for example in examples) == sorted(c.pk for c in chains)
    first = examples[0]
    chain = next(c for c in chains if c.pk == first.chain_id)
    assert first.problem == chain.problem.text
    assert first.steps == ["Step 1.", "Step 2.", "Step 3."]
    assert first.labels == [1, 1, -1]
    assert first.votes == []
    assert list(snapshot_examples(snapshot=snapshot, split="heldout")) == []
    assert snapshot_get(project=project) == snapshot
    assert snapshot_get(project=project, version=9) is None
