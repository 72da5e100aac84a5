"""Simulation runs, service by service: started at a size within the node's limits (a
request past them refused naming the limit), replayed in process on the project's newest
snapshot with the tiny backbone, the evidence stored where 'auto' reads it; cancelled or
retried as training and scoring runs are. The worker's side is
tests/prm_training/test_prm_simulation_worker.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from annotation.datasets.snapshots import snapshot_create
from prm_training.models import ProjectTrainingSettings, RunStatus, SimulationRun
from prm_training.services.simulation import (
    simulation_run_cancel,
    simulation_run_execute,
    simulation_run_retry,
    simulation_run_start,
)
from prm_training.services.strategy import acquisition_strategy_resolve
from tests.prm_training.ml_tiny import tiny_settings

pytestmark = pytest.mark.django_db


def test_a_run_asks_its_size_s_seeds_and_rounds_unless_it_says(project: Any) -> None:
    quick = simulation_run_start(project=project, user=None, size="quick")
    full = simulation_run_start(project=project, user=None, size="full", rounds=4)
    assert (quick.status, quick.seeds, quick.rounds) == (RunStatus.QUEUED, 3, 2)
    assert (full.seeds, full.rounds) == (20, 4)


def test_seeds_or_rounds_past_the_node_s_limit_are_refused_naming_it(
    project: Any, settings: Any
) -> None:
    # Given: a node that gives a run at most 4 seeds and 2 rounds
    settings.STEPLAB_SIMULATION_LIMITS = {
        "seeds": (4, "STEPLAB_SIMULATION_MAX_SEEDS"),
        "rounds": (2, "STEPLAB_SIMULATION_MAX_ROUNDS"),
    }

    # When: a full run (20 seeds, 8 rounds) is asked
    with pytest.raises(ValidationError) as refused:
        simulation_run_start(project=project, user=None, size="full")

    # Then: both are refused, each with the node's limit and the variable that raises it
    errors = refused.value.message_dict
    assert errors["seeds"] == [
        "Must be at most 4: this node's limit (STEPLAB_SIMULATION_MAX_SEEDS; ask an "
        "administrator to raise it if the node can give more)."
    ]
    assert "STEPLAB_SIMULATION_MAX_ROUNDS" in errors["rounds"][0]
    assert not SimulationRun.objects.exists()
    # ...while what fits is started
    assert simulation_run_start(project=project, user=None, size="quick", seeds=4).seeds == 4


def test_an_unknown_size_or_no_seed_is_refused(project: Any) -> None:
    with pytest.raises(ValidationError, match="Must be one of: quick, full"):
        simulation_run_start(project=project, user=None, size="huge")
    with pytest.raises(ValidationError, match="at least 1"):
        simulation_run_start(project=project, user=None, size="quick", seeds=0)


def test_a_run_replays_the_project_and_auto_reads_what_it_stored(
    arithmetic_project: Any, tiny_bert_dir: Path
) -> None:
    # Given: the project's 30 labeled chains in a snapshot, automatic runs on the tiny BERT
    snapshot = snapshot_create(project=arithmetic_project)
    ProjectTrainingSettings.objects.create(
        project=arithmetic_project, default_config=tiny_settings(tiny_bert_dir)
    )
    run = simulation_run_start(
        project=arithmetic_project, user=None, size="quick", seeds=2, rounds=1
    )

    # When: a worker runs it
    done = simulation_run_execute(simulation_run_id=run.pk, task_id="t", worker="w")

    # Then: it succeeded, every strategy was compared with random, and 'auto' follows it
    assert done is not None and done.status == RunStatus.SUCCEEDED, done and done.error
    evidence = done.evidence
    assert (evidence["chains"], evidence["snapshot"], evidence["seeds"], evidence["rounds"]) == (
        30,
        snapshot.version,
        2,
        1,
    )
    assert {line["strategy"] for line in evidence["lines"]} == {
        "entropy",
        "first_error_entropy",
        "disagreement",
        "convincing_wrong",
    }
    assert done.snapshot_version == snapshot.version
    loop = ProjectTrainingSettings.objects.get(project=arithmetic_project)
    assert loop.strategy_evidence == evidence
    assert acquisition_strategy_resolve(loop=loop) == (evidence["chosen"], evidence["why"])
    # ...its phases counted every training (2 seeds x (1 + 5 strategies x 1 round))
    assert done.phase["name"] == "writing"
    simulating = [p["name"] for p in done.phase["past"]]
    assert simulating == ["loading", "simulating"]
    # ...and a second delivery of its task does nothing
    assert simulation_run_execute(simulation_run_id=run.pk) is None


def test_too_few_labels_for_the_size_are_stored_as_such(
    arithmetic_project: Any, tiny_bert_dir: Path
) -> None:
    # Given: 30 labeled chains, far fewer than a full run needs
    snapshot_create(project=arithmetic_project)
    run = simulation_run_start(project=arithmetic_project, user=None, size="full")

    # When
    done = simulation_run_execute(simulation_run_id=run.pk)

    # Then: the run succeeded with the evidence that says so, and 'auto' stays random
    assert done is not None and done.status == RunStatus.SUCCEEDED
    loop = ProjectTrainingSettings.objects.get(project=arithmetic_project)
    assert acquisition_strategy_resolve(loop=loop) == (
        "random",
        "30 labeled chains are too few for a paired comparison (the simulation needs 425)",
    )


def test_a_project_with_no_snapshot_fails_the_run_saying_so(project: Any) -> None:
    run = simulation_run_start(project=project, user=None, size="quick")
    done = simulation_run_execute(simulation_run_id=run.pk)
    assert done is not None and done.status == RunStatus.FAILED
    assert done.error == f"project {project.pk} has no snapshot: take one first"
    assert not ProjectTrainingSettings.objects.filter(project=project).exists()


def test_a_cancelled_run_is_not_run_and_its_retry_asks_the_same(project: Any) -> None:
    # Given: a queued run, cancelled
    run = simulation_run_start(project=project, user=None, size="quick", seeds=2, rounds=1)
    cancelled = simulation_run_cancel(run=run)
    assert cancelled.status == RunStatus.CANCELLED

    # Then: its task finds nothing to do, and a second cancel is refused
    assert simulation_run_execute(simulation_run_id=run.pk) is None
    with pytest.raises(ValidationError, match="already cancelled"):
        simulation_run_cancel(run=cancelled)

    # When: it is retried
    retry = simulation_run_retry(run=cancelled, user=None)

    # Then: a new queued run with its size, seeds and rounds
    assert (retry.status, retry.size, retry.seeds, retry.rounds, retry.retry_of_id) == (
        RunStatus.QUEUED,
        "quick",
        2,
        1,
        run.pk,
    )
    with pytest.raises(ValidationError, match="Only a failed or cancelled run"):
        simulation_run_retry(run=retry, user=None)


def test_a_lost_worker_s_run_is_reaped_with_its_scratch_directory(
    project: Any, model_dir: Path, monkeypatch: Any
) -> None:
    from prm_training.services.runs import runs_reap_stale, simulation_attempt_dir

    # Given: a run RUNNING under a worker node, with its attempt's round checkpoints
    monkeypatch.setenv("STEPLAB_MODEL_DIR", str(model_dir))
    run = simulation_run_start(project=project, user=None, size="quick")
    SimulationRun.objects.filter(pk=run.pk).update(
        status=RunStatus.RUNNING, attempts=1, worker="gpu@node-1", heartbeat_at=timezone.now()
    )
    run.refresh_from_db()
    scratch = simulation_attempt_dir(run)
    (scratch / "prm").mkdir(parents=True)

    # When: that node starts again (its earlier process died)
    reaped = runs_reap_stale(worker="gpu@node-1")

    # Then: the run reads as lost, and its scratch directory is gone
    run.refresh_from_db()
    assert reaped == 1 and run.status == RunStatus.FAILED
    assert run.error.startswith("Worker lost: gpu@node-1")
    assert not scratch.exists()
