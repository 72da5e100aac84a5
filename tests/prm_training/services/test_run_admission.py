"""How much GPU work may wait (``prm_training.services.runs.run_admission_check``): a
project, and the node, hold at most STEPLAB_RUN_LIMITS queued or running runs of each
kind; one more is refused with a 429 that lists what waits, and is admitted again once
one finishes. Every task of queue "gpu" runs under the GPU time limit."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings as django_settings

from annotation.work_limits import TooManyWaiting
from prm_training.models import MachineLabelRun, RunStatus, SimulationRun, TrainingRun
from prm_training.services.runs import runs_reap_stale
from prm_training.services.simulation import simulation_run_start
from prm_training.services.training import training_maybe_autostart, training_run_start
from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db

SETTINGS = {"mode": "frozen_head", "head_epochs": 5}


def _runs_url(project: Any) -> str:
    return f"/api/v1/projects/{project.pk}/training-runs/"


def test_a_third_training_run_of_a_project_is_a_429_naming_what_waits(
    project: Any, make_member: Any, client_for: Any
) -> None:
    # Given: ML staff, and the project's two training runs queued (the default limit)
    client = client_for(make_member(project, "ml"))
    first, second = (client.post(_runs_url(project), SETTINGS, format="json") for _ in range(2))
    assert (first.status_code, second.status_code) == (201, 201)

    # When: a third is asked for
    third = client.post(_runs_url(project), SETTINGS, format="json")

    # Then: 429, naming the runs that wait and the variable that sets the limit
    assert third.status_code == 429, third.content
    body = third.json()
    assert body["code"] == "runs_waiting" and body["limit"] == 2
    assert [run["id"] for run in body["waiting"]] == [first.json()["id"], second.json()["id"]]
    assert {run["status"] for run in body["waiting"]} == {"queued"}
    assert "STEPLAB_MAX_TRAINING_RUNS_PER_PROJECT" in body["detail"]
    assert f"#{first.json()['id']} queued" in body["detail"]
    assert TrainingRun.objects.count() == 2

    # When: one is cancelled, another is admitted
    cancel = client.post(f"/api/v1/training-runs/{first.json()['id']}/cancel/")
    assert cancel.status_code == 200, cancel.content
    assert client.post(_runs_url(project), SETTINGS, format="json").status_code == 201


def test_the_node_bounds_every_project_together(settings: Any) -> None:
    # Given: a node that runs at most three simulations at a time, two per project
    limits = dict(settings.STEPLAB_RUN_LIMITS)
    limits["simulation"] = {
        "project": (2, "STEPLAB_MAX_SIMULATION_RUNS_PER_PROJECT"),
        "node": (3, "STEPLAB_MAX_SIMULATION_RUNS_PER_NODE"),
    }
    settings.STEPLAB_RUN_LIMITS = limits
    one, two = ProjectFactory(), ProjectFactory()
    simulation_run_start(project=one, user=None, size="quick")
    simulation_run_start(project=one, user=None, size="quick")
    mine = simulation_run_start(project=two, user=None, size="quick")

    # When: the second project asks for one more (its own limit not reached)
    with pytest.raises(TooManyWaiting) as refused:
        simulation_run_start(project=two, user=None, size="full")

    # Then: refused by the node's limit, listing only this project's run
    assert "STEPLAB_MAX_SIMULATION_RUNS_PER_NODE" in refused.value.detail
    assert "The node has 3 simulation runs" in refused.value.detail
    assert [run["id"] for run in refused.value.waiting] == [mine.pk]
    assert SimulationRun.objects.count() == 3


def test_a_run_whose_worker_was_lost_does_not_count(project: Any) -> None:
    # Given: two training runs RUNNING, whose heartbeats stopped long ago
    for _ in range(2):
        TrainingRun.objects.create(project=project, status=RunStatus.RUNNING, heartbeat_at=None)

    # When: another is started, it is admitted: the lost ones are reaped first
    run = training_run_start(project=project, user=None, settings=SETTINGS)
    assert run.status == RunStatus.QUEUED
    assert TrainingRun.objects.filter(status=RunStatus.FAILED).count() == 2
    assert runs_reap_stale() == 0


def test_a_full_node_leaves_the_auto_retrain_for_a_later_check(settings: Any) -> None:
    # Given: a project that retrains on every finished chain, on a node already full
    from annotation.models import Chain
    from prm_training.models import ProjectTrainingSettings
    from tests.factories import ChainFactory

    limits = dict(settings.STEPLAB_RUN_LIMITS)
    limits["training"] = {
        "project": (2, "STEPLAB_MAX_TRAINING_RUNS_PER_PROJECT"),
        "node": (1, "STEPLAB_MAX_TRAINING_RUNS_PER_NODE"),
    }
    settings.STEPLAB_RUN_LIMITS = limits
    training_run_start(project=ProjectFactory(), user=None, settings=SETTINGS)
    project = ProjectFactory()
    ProjectTrainingSettings.objects.create(project=project, retrain_every_n_finished=1)
    chain = ChainFactory(project=project)
    Chain.objects.filter(pk=chain.pk).update(is_finished=True)

    # When: its check runs, then: no run, and no error
    assert training_maybe_autostart(project=project) is None
    assert not TrainingRun.objects.filter(project=project).exists()


def test_a_machine_label_run_is_a_gpu_task_with_the_gpu_time_limit() -> None:
    # Every task routed to queue "gpu" has the long limit, machine-label runs included
    # (they once fell back to Celery's 15 minutes).
    gpu_tasks = [
        name
        for name, route in django_settings.CELERY_TASK_ROUTES.items()
        if route["queue"] == "gpu"
    ]
    assert "prm_training.machine_labels" in gpu_tasks
    for name in gpu_tasks:
        limits = django_settings.CELERY_TASK_ANNOTATIONS[name]
        assert limits["time_limit"] == django_settings.STEPLAB_GPU_TASK_TIME_LIMIT, name
        assert limits["soft_time_limit"] < limits["time_limit"], name
    from celery import current_app

    task = current_app.tasks["prm_training.machine_labels"]
    assert task.time_limit == django_settings.STEPLAB_GPU_TASK_TIME_LIMIT
    assert MachineLabelRun._meta.verbose_name == "machine label run"
