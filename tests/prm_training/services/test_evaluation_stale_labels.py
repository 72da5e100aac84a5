"""Figures on labels that changed since: a lead's ruling on a chain of an evaluation set
makes every version's figures there rest on older labels. They stay shown, a run is
queued (one waiting at most), and the run freezes the new labels and measures them again,
replacing the old figures; a ruling elsewhere queues nothing. The measurement itself is
stood in for (its own tests run a real checkpoint on a worker)."""

from __future__ import annotations

import doctest
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from annotation.datasets.evaluation_sets import evaluation_set_mark_chains
from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.models import Chain, SnapshotKind
from annotation.quality.review import AdjudicatedRating, adjudication_create
from prm_training import selectors
from prm_training.models import EvaluationResult, EvaluationRun, EvaluationTrigger, RunStatus
from prm_training.selectors import EvaluationGap, evaluation_gaps
from prm_training.services import evaluation
from prm_training.services.evaluation import SetFigures
from prm_training.services.evaluation_runs import evaluation_run_execute, evaluation_run_request
from tests.annotation.labeling.claiming import assignment_claim_next
from tests.factories import ChainFactory, annotation_with_ratings
from tests.prm_training.evaluation_versions import stored_version

pytestmark = pytest.mark.django_db


def _rule(chain: Chain, lead: Any, rating: int) -> None:
    first = chain.steps.order_by("index").first()
    assert first is not None
    adjudication_create(
        chain=chain, lead=lead, ratings=[AdjudicatedRating(step_id=first.pk, rating=rating)]
    )


def _measured_set(project: Any, tmp_path: Any) -> tuple[Any, Any, list[Chain], EvaluationResult]:
    """v1 (its checkpoint a folder) measured on a set of two labeled chains with its own
    snapshot, taken after those labels; no run waiting."""
    chains = [ChainFactory(project=project) for _ in range(3)]
    for chain in chains:
        annotation_with_ratings(chain=chain, labels=[1, 1, -1])
    version = stored_version(project, 1, checkpoint_dir=str(tmp_path))
    held = evaluation_set_mark_chains(
        project=project, chain_ids=[c.pk for c in chains[:2]], name="held"
    )
    result = EvaluationResult.objects.create(
        model_version=version, evaluation_set=held, chains=2, snapshot=version.snapshot
    )
    EvaluationRun.objects.all().delete()
    assert evaluation_gaps(project_id=project.pk) == []
    return version, held, chains, result


def test_a_ruling_on_a_set_chain_makes_its_figures_stale_and_queues_one_run(
    project: Any, make_member: Any, tmp_path: Any
) -> None:
    version, held, chains, result = _measured_set(project, tmp_path)
    lead = make_member(project, "lead")

    # When a lead rules on a chain outside any set, nothing is queued
    _rule(chains[2], lead, -1)
    assert not EvaluationRun.objects.exists()

    # When a lead rules on a chain of the set
    _rule(chains[0], lead, -1)

    # Then v1's figures there are stale (still stored) and one run waits to renew them
    assert evaluation_gaps(project_id=project.pk) == [
        EvaluationGap(version.pk, 1, held.pk, stale=True)
    ]
    assert EvaluationResult.objects.filter(pk=result.pk).exists()
    [run] = EvaluationRun.objects.filter(status=RunStatus.QUEUED)
    assert run.trigger == EvaluationTrigger.LABELS_CHANGED
    # And a second ruling before it starts is covered by the same run
    _rule(chains[1], lead, 1)
    assert list(EvaluationRun.objects.filter(status=RunStatus.QUEUED)) == [run]


def test_a_late_submit_on_a_set_chain_makes_its_figures_stale(
    project: Any, make_member: Any, tmp_path: Any
) -> None:
    # Given: ann holds a lease on a labeled chain when the lead puts it into a set, and
    # v1 is measured there (a leased chain keeps its lease: evaluation_sets' docstring)
    ann = make_member(project, "annotator")
    chain = ChainFactory(project=project)
    annotation_with_ratings(chain=chain, labels=[1, 1, -1])
    lease = assignment_claim_next(project=project, user=ann)
    assert lease is not None and lease.chain_id == chain.pk
    version = stored_version(project, 1, checkpoint_dir=str(tmp_path))
    held = evaluation_set_mark_chains(project=project, chain_ids=[chain.pk], name="held")
    EvaluationResult.objects.create(
        model_version=version, evaluation_set=held, chains=1, snapshot=version.snapshot
    )
    EvaluationRun.objects.all().delete()
    assert evaluation_gaps(project_id=project.pk) == []

    # When: ann submits it
    steps = chain.steps.order_by("index")
    assignment_submit(
        assignment_id=lease.pk,
        user=ann,
        ratings=[RatingInput(step_id=step.pk, rating=1) for step in steps],
    )

    # Then: v1's figures there rest on older labels, and a run waits to measure again
    assert evaluation_gaps(project_id=project.pk) == [
        EvaluationGap(version.pk, 1, held.pk, stale=True)
    ]
    [run] = EvaluationRun.objects.filter(status=RunStatus.QUEUED)
    assert run.trigger == EvaluationTrigger.LABELS_CHANGED


def test_a_run_measures_stale_figures_again_on_labels_it_freezes(
    project: Any, make_member: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    version, held, chains, result = _measured_set(project, tmp_path)
    _rule(chains[0], make_member(project, "lead"), -1)
    [run] = EvaluationRun.objects.filter(status=RunStatus.QUEUED)
    asked: list[tuple[int, set[int] | None]] = []

    def measure(*, checkpoint_dir: str, snapshot: Any, phase: Any, only: Any, leave: Any) -> Any:
        asked.append((snapshot.pk, only))
        members = frozenset(Chain.objects.filter(evaluation_set=held).values_list("pk", flat=True))
        return [SetFigures(held.pk, "held", 2, 0, loses=False, members=members)]

    monkeypatch.setattr(evaluation, "evaluation_sets_measure", measure)

    # When a worker runs it
    ended = evaluation_run_execute(run_id=run.pk, task_id="t", worker="w")

    # Then it froze the labels as they are now (the loop's own kind, naming the run)...
    assert ended is not None and ended.status == RunStatus.SUCCEEDED, ended.error
    labels = ended.snapshot
    assert labels is not None and labels.pk != version.snapshot_id
    assert labels.kind == SnapshotKind.TRAINING and labels.meta["evaluation_run"] == run.pk
    # ...measured v1 on the set with them, and replaced the stale figures
    assert asked == [(labels.pk, {held.pk})] and ended.filled == 1
    renewed = EvaluationResult.objects.get(model_version=version, evaluation_set=held)
    assert renewed.pk != result.pk and renewed.snapshot_id == labels.pk
    # And nothing is left to measure: asking again has nothing to run
    assert evaluation_gaps(project_id=project.pk) == []
    with pytest.raises(ValidationError, match="Every version has figures"):
        evaluation_run_request(project_id=project.pk, user=None)


def test_the_figures_say_when_their_set_s_labels_changed_since(
    project: Any, make_member: Any, client_for: Any, tmp_path: Any
) -> None:
    # Given v1 measured on a set, read by ML staff and a lead
    _, held, chains, _ = _measured_set(project, tmp_path)
    url = f"/api/v1/projects/{project.pk}/evaluation-results/"
    ml = client_for(make_member(project, "ml"))

    def changed_since() -> list[bool]:
        response = ml.get(url)
        assert response.status_code == 200
        return [row["labels_changed_since"] for row in response.json()]

    assert changed_since() == [False]

    # When a lead rules on a chain of the set
    _rule(chains[0], make_member(project, "lead"), -1)

    # Then the figures, still shown, say their labels changed since
    assert changed_since() == [True]


def test_the_outdated_rule_s_examples_hold() -> None:
    result = doctest.testmod(selectors)
    assert result.attempted and not result.failed
