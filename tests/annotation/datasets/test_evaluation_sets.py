"""Evaluation sets: an import's chains held out, never leased, never trained on."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from annotation.datasets.evaluation_sets import evaluation_set_mark, evaluation_set_unmark
from annotation.datasets.snapshots import snapshot_create
from annotation.models import Chain, EvaluationSet, ImportBatch, SnapshotSplit
from prm_training.services.examples import snapshot_chain_examples
from tests.annotation.labeling.claiming import assignment_claim_next
from tests.factories import ChainFactory, ImportBatchFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


def _imported(project, batch: ImportBatch, count: int, *, priority: float = 0.0) -> list[Chain]:
    chains = [
        ChainFactory(project=project, import_batch=batch, priority=priority) for _ in range(count)
    ]
    for chain in chains:
        annotation_with_ratings(chain=chain, labels=[1, -1, None], import_batch=batch)
    return chains


def test_a_marked_import_is_never_leased_and_comes_back_when_unmarked(project, make_member):
    # Given an import whose chains top the queue, and one ordinary chain below them
    held = _imported(project, ImportBatchFactory(project=project), 3, priority=10.0)
    ordinary = ChainFactory(project=project, priority=0.0)
    annotator = make_member(project, "annotator")
    # When a lead marks the import as an evaluation set
    marked = evaluation_set_mark(
        project=project, import_batch_id=held[0].import_batch_id, name="unseen"
    )
    # Then its chains are in the set and the queue offers the ordinary chain only
    assert set(marked.chains.values_list("pk", flat=True)) == {c.pk for c in held}
    lease = assignment_claim_next(project=project, user=annotator)
    assert lease is not None and lease.chain_id == ordinary.pk
    # And once unmarked, they are work again
    assert evaluation_set_unmark(evaluation_set=marked) == 3
    other = make_member(project, "annotator")
    lease = assignment_claim_next(project=project, user=other)
    assert lease is not None and lease.chain_id in {c.pk for c in held}
    assert not EvaluationSet.objects.exists()


def test_training_reads_no_chain_of_an_evaluation_set_in_either_split(project):
    # Given a snapshot holding the labels of two imports (taken before either is marked)
    project.import_labels = "fallback"
    project.save()
    trained = _imported(project, ImportBatchFactory(project=project), 20)
    held = _imported(project, ImportBatchFactory(project=project), 20)
    snapshot = snapshot_create(
        project=project, finished_only=False, heldout_fraction=0.5, include_imported=True
    )
    every = {e.chain_id for e in snapshot_chain_examples(snapshot=snapshot)}
    assert every == {c.pk for c in trained + held}
    # When the second import becomes an evaluation set
    evaluation_set_mark(project=project, import_batch_id=held[0].import_batch_id)
    # Then neither split of that snapshot, as training reads it, holds one of its chains
    read = set()
    for split in (SnapshotSplit.TRAIN, SnapshotSplit.HELDOUT):
        ids = {
            e.chain_id
            for e in snapshot_chain_examples(
                snapshot=snapshot, split=split, without_evaluation=True
            )
        }
        assert ids and not ids & {c.pk for c in held}
        read |= ids
    assert read == {c.pk for c in trained}


def test_marking_refuses_twice_a_taken_name_and_an_import_of_gold_only(project):
    first = _imported(project, ImportBatchFactory(project=project, filename="a.jsonl"), 2)
    evaluation_set_mark(project=project, import_batch_id=first[0].import_batch_id)
    with pytest.raises(ValidationError, match="already an evaluation set"):
        evaluation_set_mark(project=project, import_batch_id=first[0].import_batch_id)
    second = _imported(project, ImportBatchFactory(project=project), 1)
    with pytest.raises(ValidationError, match="of this name"):
        evaluation_set_mark(
            project=project, import_batch_id=second[0].import_batch_id, name="a.jsonl"
        )
    from annotation.quality.gold import gold_mark_from_import

    gold_mark_from_import(project=project, import_batch_id=second[0].import_batch_id)
    with pytest.raises(ValidationError, match="no chain to hold out"):
        evaluation_set_mark(project=project, import_batch_id=second[0].import_batch_id)
    other = ImportBatchFactory()
    with pytest.raises(ImportBatch.DoesNotExist):
        evaluation_set_mark(project=project, import_batch_id=other.pk)


def test_progress_leaves_the_chains_of_an_evaluation_set_out(project):
    from annotation.projects.selectors import progress_annotations

    held = _imported(project, ImportBatchFactory(project=project), 3)
    ChainFactory(project=project)

    def total() -> int:
        return (
            type(project)
            .objects.filter(pk=project.pk)
            .aggregate(**{"n": progress_annotations()["chains_total"]})["n"]
        )

    assert total() == 4
    evaluation_set_mark(project=project, import_batch_id=held[0].import_batch_id)
    assert total() == 1


def test_a_chain_of_an_evaluation_set_cannot_be_made_gold(project):
    from annotation.quality.gold import gold_mark, gold_mark_from_import

    held = _imported(project, ImportBatchFactory(project=project), 2)
    evaluation_set_mark(project=project, import_batch_id=held[0].import_batch_id)
    with pytest.raises(ValidationError, match="evaluation set"):
        gold_mark(project=project, chain_ids=[held[0].pk])
    # From the import: none of its chains is marked (they are all held out)
    assert gold_mark_from_import(project=project, import_batch_id=held[0].import_batch_id) == []
    assert not Chain.objects.filter(is_gold=True).exists()
