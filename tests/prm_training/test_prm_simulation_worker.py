"""A simulation run on a real Celery worker (Redis, PostgreSQL), through the API as ML
staff use it: started, it answers queued (no request runs it); the worker counts its
trainings with a rate and an ETA and, when it ends, stores the evidence 'auto' reads; a
cancelled run stops within seconds and stores nothing; its retry asks the same."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from prm_worker import WorkerFactory, wait_until

from annotation.datasets.snapshots import snapshot_create
from prm_training.models import ProjectTrainingSettings
from tests.prm_training.ml_tiny import tiny_settings

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _until(client: Any, url: str, check: Any, *, timeout: float, what: str, worker: Any) -> dict:
    seen: dict[str, Any] = {}

    def ready() -> bool:
        response = client.get(url)
        assert response.status_code == 200, response.content
        seen.update(response.json())
        return bool(check(seen))

    wait_until(ready, timeout=timeout, what=what, diagnose=lambda: f"{seen}\n{worker.output()}")
    return seen


def _simulating(run: dict[str, Any]) -> bool:
    phase = run["phase"]
    return bool(phase) and phase["name"] == "simulating" and phase["rate"] is not None


def test_a_simulation_run_stores_evidence_and_a_cancel_stops_the_next_soon(
    celery_workers: WorkerFactory,
    arithmetic_project: Any,
    make_member: Any,
    client_for: Any,
    tiny_bert_dir: Path,
) -> None:
    # Given: the project's labels in a snapshot, automatic runs on the tiny BERT, a worker
    project = arithmetic_project
    snapshot = snapshot_create(project=project)
    ProjectTrainingSettings.objects.create(
        project=project, default_config=tiny_settings(tiny_bert_dir)
    )
    worker = celery_workers.start()
    ml = client_for(make_member(project, "ml"))
    lead = client_for(make_member(project, "lead"))

    # When: ML staff start a quick run of 2 seeds and 1 round
    started = ml.post(
        f"/api/v1/projects/{project.pk}/simulation-runs/",
        {"size": "quick", "seeds": 2, "rounds": 1},
        format="json",
    )

    # Then: it answers queued, and the worker runs it to the end
    assert started.status_code == 201, started.content
    assert started.json()["status"] == "queued"
    url = f"/api/v1/simulation-runs/{started.json()['id']}/"
    run = _until(
        lead,
        url,
        lambda r: r["status"] not in ("queued", "running"),
        timeout=300,
        what="the run",
        worker=worker,
    )
    assert run["status"] == "succeeded", run["error"]
    assert run["phase"]["past"][-1] == {
        "name": "simulating",
        "seconds": pytest.approx(run["phase"]["past"][-1]["seconds"]),
    }
    assert run["snapshot_version"] == snapshot.version and run["evidence"]["seeds"] == 2
    # ...and 'auto' reads what it stored, as the settings API says
    settings = ml.get(f"/api/v1/projects/{project.pk}/training-settings/").json()
    assert settings["strategy_evidence"] == run["evidence"]
    assert settings["applied_strategy"] == {
        "strategy": run["evidence"]["chosen"],
        "why": run["evidence"]["why"],
    }
    listed = lead.get(f"/api/v1/projects/{project.pk}/simulation-runs/").json()
    assert [r["id"] for r in listed] == [run["id"]]

    # When: they start a longer one (the node's most seeds: 20 x (1 + 5 x 2) trainings,
    # where 3 seeds ended in 2.4 s on a quiet machine, before the cancel came; 30 labeled
    # chains allow 2 rounds) and cancel it while it simulates
    longer = ml.post(
        f"/api/v1/projects/{project.pk}/simulation-runs/",
        {"size": "quick", "seeds": 20, "rounds": 2},
        format="json",
    ).json()
    url = f"/api/v1/simulation-runs/{longer['id']}/"
    running = _until(ml, url, _simulating, timeout=240, what="simulating", worker=worker)
    assert running["phase"]["unit"] == "trainings" and running["phase"]["total"] == 220
    assert running["phase"]["eta_seconds"] is not None
    cancel = ml.post(f"{url}cancel/")
    asked = time.monotonic()
    assert cancel.status_code == 200 and cancel.json()["cancel_requested"], cancel.content

    # Then: it stops within seconds and stores nothing: 'auto' keeps the first run's evidence
    stopped = _until(
        ml, url, lambda r: r["status"] == "cancelled", timeout=60, what="the cancel", worker=worker
    )
    print(f"cancel latency: {time.monotonic() - asked:.1f} s")
    assert stopped["evidence"] == {}
    loop = ProjectTrainingSettings.objects.get(project=project)
    assert loop.strategy_evidence == run["evidence"]

    # When: they retry it
    retry = ml.post(f"{url}retry/")

    # Then: a new run asks the same, naming the one it retries
    assert retry.status_code == 201, retry.content
    body = retry.json()
    assert (body["seeds"], body["rounds"], body["retry_of"]) == (20, 2, longer["id"])
    ml.post(f"/api/v1/simulation-runs/{body['id']}/cancel/")
