"""Evaluation runs without a worker: which (version, set) pairs lack figures, when a run is
queued (a set marked, a set's chains changed, ML staff asking; one waiting at most), the
figures of a set whose chains changed meanwhile never written, a version whose checkpoint
is gone skipped with its reason, and the endpoint. Scoring itself runs on a real worker
(tests/prm_training/test_evaluation_runs_worker.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.datasets.evaluation_sets import (
    chains_evaluation_set_add,
    evaluation_set_mark,
    evaluation_set_mark_chains,
    evaluation_set_unmark,
)
from prm_training.models import (
    EvaluationResult,
    EvaluationRun,
    EvaluationTrigger,
    ModelVersion,
    RunStatus,
    TrainingRun,
)
from prm_training.selectors import EvaluationGap, evaluation_gaps
from prm_training.services.evaluation import SetFigures, evaluation_results_write
from prm_training.services.evaluation_runs import (
    CHECKPOINT_GONE,
    NO_LABELS,
    evaluation_run_enqueue,
    evaluation_run_execute,
)
from prm_training.services.model_versions import training_run_publish
from prm_training.services.training_progress import TrainingReporter
from tests.factories import ChainFactory, ImportBatchFactory
from tests.prm_training.evaluation_versions import stored_version

pytestmark = pytest.mark.django_db


def _chains(project: Any, n: int) -> list[int]:
    return [ChainFactory(project=project).pk for _ in range(n)]


def _waiting(project: Any) -> list[EvaluationRun]:
    return list(EvaluationRun.objects.filter(project=project, status=RunStatus.QUEUED))


def test_the_gaps_are_every_version_on_every_set_without_figures(project: Any) -> None:
    # Given two versions and two sets, v2 measured on the first
    first, second = stored_version(project, 1), stored_version(project, 2)
    ids = _chains(project, 3)
    a = evaluation_set_mark_chains(project=project, chain_ids=ids[:1], name="a")
    b = evaluation_set_mark_chains(project=project, chain_ids=ids[1:2], name="b")
    EvaluationResult.objects.create(model_version=second, evaluation_set=a)
    # Then the gaps are the three other pairs, newest version first
    assert evaluation_gaps(project_id=project.pk) == [
        EvaluationGap(second.pk, 2, b.pk),
        EvaluationGap(first.pk, 1, a.pk),
        EvaluationGap(first.pk, 1, b.pk),
    ]


def test_a_set_marked_queues_one_run_and_a_later_change_waits_for_it(project: Any) -> None:
    # Given a project with no version: marking a set queues nothing (nothing to score)
    ids = _chains(project, 4)
    evaluation_set_mark_chains(project=project, chain_ids=ids[:1], name="early")
    assert not EvaluationRun.objects.exists()

    # When a version exists and a lead marks another set
    stored_version(project, 1)
    later = evaluation_set_mark_chains(project=project, chain_ids=ids[1:2], name="later")

    # Then one run waits, queued by the change
    [run] = _waiting(project)
    assert run.trigger == EvaluationTrigger.SETS_CHANGED

    # When the lead puts a chain into the set before the run starts
    changed = chains_evaluation_set_add(project=project, chain_ids=ids[2:3], evaluation_set=later)
    assert changed.changed == [ids[2]]
    # Then the waiting run covers it: still one
    assert _waiting(project) == [run]

    # When the run has started (it may have read the sets before the change)
    EvaluationRun.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING)
    chains_evaluation_set_add(project=project, chain_ids=ids[3:4], evaluation_set=later)
    # Then the change queues the next one
    [following] = _waiting(project)
    assert following.pk != run.pk


def test_an_import_marked_as_a_set_queues_a_run_for_the_versions_made_before(
    project: Any,
) -> None:
    stored_version(project, 1)
    batch = ImportBatchFactory(project=project, filename="unseen.jsonl")
    ChainFactory(project=project, import_batch=batch)
    evaluation_set_mark(project=project, import_batch_id=batch.pk)
    [run] = _waiting(project)
    assert run.trigger == EvaluationTrigger.SETS_CHANGED


def test_a_changed_set_loses_its_figures_and_a_run_is_queued_to_measure_it_again(
    project: Any,
) -> None:
    # Given v1 measured on a set, nothing missing, no run waiting
    version = stored_version(project, 1)
    ids = _chains(project, 2)
    held = evaluation_set_mark_chains(project=project, chain_ids=ids[:1], name="held")
    EvaluationRun.objects.all().delete()
    EvaluationResult.objects.create(model_version=version, evaluation_set=held, chains=1)
    assert evaluation_run_enqueue(project_id=project.pk, trigger="version") is None

    # When the lead puts a chain into it from the data manager
    chains_evaluation_set_add(project=project, chain_ids=ids[1:], evaluation_set=held)

    # Then the figures that described the old chains are gone, and a run will refill them
    assert not EvaluationResult.objects.filter(evaluation_set=held).exists()
    assert len(_waiting(project)) == 1
    # And unmarking the set leaves nothing to fill (its figures and gaps go with it)
    EvaluationRun.objects.all().delete()
    evaluation_set_unmark(evaluation_set=held)
    assert evaluation_gaps(project_id=project.pk) == []
    assert not EvaluationRun.objects.exists()


def test_figures_of_chains_a_set_no_longer_holds_are_not_written(project: Any) -> None:
    # Given v1's figures measured on a set of two chains
    version = stored_version(project, 1)
    ids = _chains(project, 3)
    held = evaluation_set_mark_chains(project=project, chain_ids=ids[:2], name="held")
    figures = SetFigures(
        evaluation_set_id=held.pk,
        name="held",
        chains=2,
        unlabeled_chains=0,
        members=frozenset(ids[:2]),
    )
    # When a lead adds a chain before they are written
    chains_evaluation_set_add(project=project, chain_ids=ids[2:], evaluation_set=held)
    written = evaluation_results_write(version=version, figures=[figures], snapshot=None)
    # Then nothing is written: the next run measures the three chains
    assert written == [] and not EvaluationResult.objects.exists()

    # And figures of the set's chains as they are now are written, with their labels
    now = SetFigures(
        evaluation_set_id=held.pk,
        name="held",
        chains=3,
        unlabeled_chains=0,
        members=frozenset(ids),
    )
    assert evaluation_results_write(version=version, figures=[now], snapshot=version.snapshot) == [
        now
    ]
    stored = EvaluationResult.objects.get()
    assert (stored.chains, stored.snapshot_id) == (3, version.snapshot_id)


def test_a_run_skips_a_version_whose_checkpoint_is_gone_and_says_why(project: Any) -> None:
    # Given v1 without figures on a set, its checkpoint not on disk
    version = stored_version(project, 1)
    evaluation_set_mark_chains(project=project, chain_ids=_chains(project, 1), name="held")
    [run] = _waiting(project)

    # When a worker runs it
    ended = evaluation_run_execute(run_id=run.pk, task_id="t", worker="w")

    # Then it ends, having filled nothing, and names the version and the reason
    assert ended is not None and ended.status == RunStatus.SUCCEEDED, ended.error
    assert ended.filled == 0 and ended.snapshot_id == version.snapshot_id
    assert ended.skipped == [{"model_version": version.pk, "version": 1, "reason": CHECKPOINT_GONE}]
    # And a second delivery of the same run does nothing
    assert evaluation_run_execute(run_id=run.pk, task_id="t2", worker="w") is None


def test_without_labels_a_run_says_there_are_none_to_measure_with(project: Any) -> None:
    version = stored_version(project, 1, snapshot=False)
    evaluation_set_mark_chains(project=project, chain_ids=_chains(project, 1), name="held")
    [run] = _waiting(project)
    ended = evaluation_run_execute(run_id=run.pk)
    assert ended is not None and ended.status == RunStatus.SUCCEEDED
    assert ended.skipped == [{"model_version": version.pk, "version": 1, "reason": NO_LABELS}]


def test_ml_staff_ask_for_a_run_and_leads_follow_it(project: Any, make_member: Any) -> None:
    version = stored_version(project, 1)
    held = evaluation_set_mark_chains(project=project, chain_ids=_chains(project, 1), name="held")
    [waiting] = _waiting(project)
    url = reverse("api-evaluation-runs", kwargs={"project_id": project.pk})
    ml, lead = APIClient(), APIClient()
    ml.force_login(make_member(project, "ml"))
    lead.force_login(make_member(project, "lead"))

    # ML staff asking while one waits get that one
    asked = ml.post(url, {}, format="json")
    assert asked.status_code == 201, asked.json()
    assert asked.json()["id"] == waiting.pk and asked.json()["trigger"] == "sets_changed"
    # A lead reads the runs, the labels each measures with once it started
    evaluation_run_execute(run_id=waiting.pk)
    [row] = lead.get(url).json()
    assert (row["status"], row["snapshot_label"], row["filled"]) == ("succeeded", "v1", 0)
    assert row["skipped"][0]["reason"] == CHECKPOINT_GONE
    # After a failure ML staff ask again: a new run, theirs
    again = ml.post(url, {}, format="json")
    assert again.status_code == 201 and again.json()["trigger"] == "manual"
    assert again.json()["started_by"] is not None and again.json()["id"] != waiting.pk
    # With nothing missing there is nothing to run
    EvaluationRun.objects.all().delete()
    EvaluationResult.objects.create(model_version=version, evaluation_set=held)
    refused = ml.post(url, {}, format="json")
    assert refused.status_code == 400 and "Every version has figures" in str(refused.json())
    assert ml.post(url, {"version": 1}, format="json").status_code == 400  # unknown field


def test_the_results_say_which_labels_and_when(project: Any, make_member: Any) -> None:
    version = stored_version(project, 1)
    held = evaluation_set_mark_chains(project=project, chain_ids=_chains(project, 1), name="held")
    EvaluationResult.objects.create(
        model_version=version, evaluation_set=held, snapshot=version.snapshot
    )
    client = APIClient()
    client.force_login(make_member(project, "lead"))
    [row] = client.get(reverse("api-evaluation-results", kwargs={"project_id": project.pk})).json()
    assert (row["evaluation_set_name"], row["snapshot_label"]) == ("held", "v1")
    assert row["created_at"]


def test_a_version_published_unmeasured_queues_a_run_to_measure_it(
    project: Any, tmp_path: Any
) -> None:
    # Given a set, and a training run whose measurement on it failed (figures None)
    evaluation_set_mark_chains(project=project, chain_ids=_chains(project, 1), name="held")
    assert not EvaluationRun.objects.exists()  # no version yet: nothing to fill
    run = TrainingRun.objects.create(project=project, status=RunStatus.RUNNING, attempts=1)
    result = SimpleNamespace(metrics={}, checkpoint_dir=tmp_path, heldout_scores=[], readout=None)

    # When it publishes its version
    training_run_publish(
        run=run,
        snapshot=None,
        result=result,
        heldout=[],
        reporter=TrainingReporter(run),
        figures=None,
    )

    # Then a run is queued to measure it there
    version = ModelVersion.objects.get(training_run=run)
    [waiting] = _waiting(project)
    assert waiting.trigger == EvaluationTrigger.VERSION
    assert [gap.model_version_id for gap in evaluation_gaps(project_id=project.pk)] == [version.pk]
