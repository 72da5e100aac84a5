"""The data manager's bulk action into and out of an evaluation set: the preview counts
what the evaluation-set rules leave (gold, another set, this set), the chains leave the
queue and training and come back, each changed chain's history names the set, and a set
of another project or one unmarked before the run is refused with nothing changed."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError

from annotation.chains import bulk_actions
from annotation.chains.bulk_actions import (
    Selection,
    bulk_action_create,
    bulk_action_execute,
    bulk_action_preview,
)
from annotation.chains.selectors import ChainFilters, ChainStatus
from annotation.datasets.evaluation_sets import (
    GOLD,
    IN_ANOTHER_SET,
    IN_THIS_SET,
    NOT_IN_THIS_SET,
    evaluation_set_mark_chains,
    evaluation_set_unmark,
)
from annotation.datasets.snapshots import snapshot_create
from annotation.models import (
    BulkActionKind,
    BulkActionStatus,
    Chain,
    ChainEvent,
    ChainEventKind,
    EvaluationSet,
    Role,
)
from annotation.quality.gold import gold_mark
from prm_training.models import EvaluationResult
from prm_training.services.examples import snapshot_chain_examples
from tests.annotation.chains.bulk_lab import bulk_run
from tests.annotation.labeling.claiming import assignment_claim_next
from tests.factories import (
    ChainFactory,
    MembershipFactory,
    ProjectFactory,
    annotation_with_ratings,
    scoring_run_with_model_version,
)

pytestmark = pytest.mark.django_db

ADD = BulkActionKind.EVALUATION_ADD
REMOVE = BulkActionKind.EVALUATION_REMOVE


@pytest.fixture
def lab(monkeypatch: Any) -> dict[str, Any]:
    """A project with a lead and an annotator; ten labeled chains: 0-1 gold, 2-3 in the
    set "other", 4 in the set "held" (the one the tests fill), 5-9 free."""
    # The tests run the task's body themselves: no task is sent.
    monkeypatch.setattr(bulk_actions, "bulk_action_enqueue", lambda *, job_id: None)
    project = ProjectFactory(overlap=1, import_labels="fallback")
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    annotator = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    chains = [ChainFactory(project=project, step_count=3, priority=10.0) for _ in range(10)]
    for chain in chains:
        annotation_with_ratings(chain=chain, labels=[1, 1, -1])
    ids = [chain.pk for chain in chains]
    gold_mark(project=project, chain_ids=ids[:2])
    other = evaluation_set_mark_chains(project=project, chain_ids=ids[2:4], name="other")
    held = evaluation_set_mark_chains(project=project, chain_ids=ids[4:5], name="held")
    ChainEvent.objects.all().delete()  # the set-up's own history
    return {
        "project": project,
        "lead": lead,
        "annotator": annotator,
        "ids": ids,
        "other": other,
        "held": held,
    }


def _in(evaluation_set: EvaluationSet) -> list[int]:
    return sorted(Chain.objects.filter(evaluation_set=evaluation_set).values_list("pk", flat=True))


def test_a_selection_goes_into_a_set_leaving_gold_and_other_sets_and_leaves_the_queue(
    lab: dict[str, Any],
) -> None:
    # Given: every chain ticked, the set "held" named
    ids, held = lab["ids"], lab["held"]
    selection = Selection(chain_ids=tuple(ids))
    params = {"evaluation_set": held.pk}

    # When: the lead counts, then does it
    preview = bulk_action_preview(
        project=lab["project"], kind=ADD, params=params, selection=selection
    )
    job = bulk_run(lab, ADD, selection, **params)

    # Then: the free chains are in the set; gold, the other set's and its own are left
    assert (preview.matched, preview.changed) == (10, 5)
    assert preview.unchanged == {IN_THIS_SET: 1, IN_ANOTHER_SET: 2, GOLD: 2}
    assert (job.status, job.matched, job.changed) == (BulkActionStatus.DONE, 10, 5)
    assert job.unchanged == preview.unchanged
    assert _in(held) == ids[4:]
    assert _in(lab["other"]) == ids[2:4]
    # Each changed chain's history names the set and the job
    events = ChainEvent.objects.filter(kind=ChainEventKind.EVALUATION_ADDED).order_by("chain_id")
    assert [e.chain_id for e in events] == ids[5:]
    assert {(e.actor_id, e.bulk_action_id) for e in events} == {(lab["lead"].pk, job.pk)}
    assert events[0].detail == {"evaluation_set": held.pk, "name": "held"}
    # The queue offers only gold now (every other chain is held out)
    lease = assignment_claim_next(project=lab["project"], user=lab["annotator"])
    assert lease is None or lease.chain_id in ids[:2]
    # And training reads none of them, in either split
    snapshot = snapshot_create(
        project=lab["project"], finished_only=False, heldout_fraction=0.5, include_imported=True
    )
    read = {e.chain_id for e in snapshot_chain_examples(snapshot=snapshot, without_evaluation=True)}
    assert read == set(ids[:2])


def test_a_filter_takes_chains_out_of_a_set_and_back_to_work(lab: dict[str, Any]) -> None:
    # Given: the set "other" holds chains 2 and 3
    ids, other = lab["ids"], lab["other"]
    params = {"evaluation_set": other.pk}
    selection = Selection(filters=ChainFilters(statuses=(ChainStatus.UNLABELED,)))
    every = Selection(filters=ChainFilters())

    # When: the lead takes every chain of the project out of it
    preview = bulk_action_preview(
        project=lab["project"], kind=REMOVE, params=params, selection=every
    )
    job = bulk_run(lab, REMOVE, every, **params)

    # Then: its two chains are work again; the others were not in it and are left
    left = {NOT_IN_THIS_SET: 8}
    assert (preview.matched, preview.changed, preview.unchanged) == (10, 2, left)
    assert (job.status, job.changed, job.unchanged) == (BulkActionStatus.DONE, 2, left)
    assert _in(other) == []
    assert EvaluationSet.objects.filter(pk=other.pk).exists()  # the set stays, empty
    assert _in(lab["held"]) == ids[4:5]
    removed = ChainEvent.objects.filter(kind=ChainEventKind.EVALUATION_REMOVED)
    assert sorted(removed.values_list("chain_id", flat=True)) == ids[2:4]
    # A second run changes nothing and records nothing more
    again = bulk_action_preview(
        project=lab["project"], kind=REMOVE, params=params, selection=selection
    )
    assert again.changed == 0
    assert bulk_run(lab, REMOVE, every, **params).changed == 0
    assert removed.count() == 2


def test_the_set_is_checked_refused_from_another_project_and_when_unmarked(
    lab: dict[str, Any],
) -> None:
    selection = Selection(chain_ids=tuple(lab["ids"][5:]))
    elsewhere = ProjectFactory()
    foreign = evaluation_set_mark_chains(
        project=elsewhere, chain_ids=[ChainFactory(project=elsewhere).pk], name="theirs"
    )

    def refused(params: dict[str, Any], kind: str = ADD) -> set[str]:
        with pytest.raises(ValidationError) as error:
            bulk_action_preview(
                project=lab["project"], kind=kind, params=params, selection=selection
            )
        return set(error.value.message_dict)

    assert refused({}) == {"evaluation_set"}
    assert refused({"evaluation_set": foreign.pk}) == {"evaluation_set"}
    assert refused({"evaluation_set": foreign.pk}, kind=REMOVE) == {"evaluation_set"}
    assert refused({"evaluation_set": str(lab["held"].pk)}) == {"evaluation_set"}
    assert refused({"evaluation_set": lab["held"].pk, "more": 1}) == {"more"}
    assert refused({"evaluation_set": lab["held"].pk}, kind=BulkActionKind.UNFLAG) == {
        "evaluation_set"
    }

    # A set unmarked between the confirmation and the run: the job fails, nothing changes
    job = bulk_action_create(
        project=lab["project"],
        user=lab["lead"],
        kind=ADD,
        params={"evaluation_set": lab["held"].pk},
        selection=selection,
        expected=5,
    )
    evaluation_set_unmark(evaluation_set=lab["held"])
    bulk_action_execute(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == BulkActionStatus.FAILED
    assert "evaluation set" in job.detail
    assert not Chain.objects.filter(pk__in=lab["ids"][5:], evaluation_set__isnull=False).exists()
    assert not ChainEvent.objects.exists()


def test_figures_on_a_set_whose_chains_changed_are_dropped(lab: dict[str, Any]) -> None:
    # Given: a version with figures on both sets
    version = scoring_run_with_model_version(project=lab["project"], content_hash="v").model_version
    for evaluation_set in (lab["held"], lab["other"]):
        EvaluationResult.objects.create(model_version=version, evaluation_set=evaluation_set)
    selection = Selection(chain_ids=tuple(lab["ids"][5:]))

    # When: chains go into "held"; Then: its figures describe other chains, and go
    bulk_run(lab, ADD, selection, evaluation_set=lab["held"].pk)
    assert list(EvaluationResult.objects.values_list("evaluation_set_id", flat=True)) == [
        lab["other"].pk
    ]
    # A run that changes nothing keeps the figures; one that takes chains out drops them
    bulk_run(lab, REMOVE, selection, evaluation_set=lab["other"].pk)
    assert EvaluationResult.objects.count() == 1
    bulk_run(
        lab, REMOVE, Selection(chain_ids=tuple(lab["ids"][2:3])), evaluation_set=lab["other"].pk
    )
    assert not EvaluationResult.objects.exists()
