"""A run's life on a real Celery worker (Redis, PostgreSQL), through the API as ML staff
use it: a started run answers queued (no request runs it), reports its phases with a
rate and an ETA, stops within seconds of a cancel without touching the active version;
a run whose worker is killed reads as lost within a minute of the kill on the next read,
and its retry runs on the next worker. Scoring reports and cancels the same way, leaving
the queue's order as it was.

The heartbeat and the staleness are shortened here (4 s, 16 s instead of 10 s, 40 s) to
keep the test short; `make demo`'s test (tests/test_demo_serve.py) uses the defaults."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest
from prm_worker import WorkerFactory, wait_until

from annotation.models import Chain, Problem, Step
from prm_training.models import ModelVersion, RunStatus, ScoringRun, TrainingRun
from prm_training.services.runs import training_attempt_dir
from tests.prm_training.ml_tiny import tiny_settings

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HEARTBEAT = {"STEPLAB_RUN_HEARTBEAT_SECONDS": "4", "STEPLAB_TRAINING_STALE_SECONDS": "16"}


@pytest.fixture
def short_heartbeat(monkeypatch: Any) -> dict[str, str]:
    """The worker's heartbeat and this process's reaper (the API reaps on reads) both
    use the shortened times."""
    for name, value in HEARTBEAT.items():
        monkeypatch.setenv(name, value)
    return HEARTBEAT


def _active_version(project: Any) -> ModelVersion:
    from annotation.datasets.snapshots import snapshot_create

    earlier = TrainingRun.objects.create(project=project, status=RunStatus.SUCCEEDED)
    return ModelVersion.objects.create(
        project=project,
        training_run=earlier,
        snapshot=snapshot_create(project=project),
        version=1,
        checkpoint_dir="/nonexistent/checkpoint",
        metrics={"processbench_f1": 0.5},
        is_active=True,
    )


def _get(client: Any, url: str) -> dict[str, Any]:
    response = client.get(url)
    assert response.status_code == 200, response.content
    return response.json()


def _until(client: Any, url: str, check: Any, *, timeout: float, what: str, worker: Any) -> dict:
    seen: dict[str, Any] = {}

    def ready() -> bool:
        seen.update(_get(client, url))
        return bool(check(seen))

    wait_until(ready, timeout=timeout, what=what, diagnose=lambda: f"{seen}\n{worker.output()}")
    return seen


def _training(phase: Any) -> bool:
    return bool(phase) and phase["name"] == "training" and phase["rate"] is not None


def test_a_training_run_reports_its_phases_and_stops_soon_after_a_cancel(
    celery_workers: WorkerFactory,
    arithmetic_project: Any,
    make_member: Any,
    client_for: Any,
    tiny_bert_dir: Path,
    endless_runs_allowed: None,
) -> None:
    # Given an active version, a worker, and ML staff
    project = arithmetic_project
    active = _active_version(project)
    worker = celery_workers.start()
    ml = client_for(make_member(project, "ml"))

    # When they start a run that would train for ever
    started = ml.post(
        f"/api/v1/projects/{project.pk}/training-runs/",
        tiny_settings(tiny_bert_dir, head_epochs=1_000_000),
        format="json",
    )

    # Then the request answers with the run queued (no request runs a task) ...
    assert started.status_code == 201, started.content
    assert started.json()["status"] == "queued"
    url = f"/api/v1/training-runs/{started.json()['id']}/"
    # ... and the worker reports its phases: training, epoch by epoch, with a rate and an ETA
    run = _until(
        ml,
        url,
        lambda r: _training(r["phase"]),
        timeout=240,
        what="the training phase",
        worker=worker,
    )
    phase = run["phase"]
    assert run["status"] == "running" and run["worker"].startswith("trn-worker@")
    assert phase["unit"] == "batches" and phase["detail"].startswith("epoch ")
    assert 0 < phase["done"] <= phase["total"] and phase["eta_seconds"] > 0
    assert [p["name"] for p in phase["past"]] == ["snapshot", "loading", "encoding"]

    # When they cancel it
    cancel = ml.post(f"{url}cancel/")
    asked = time.monotonic()
    assert cancel.status_code == 200 and cancel.json()["cancel_requested"], cancel.content

    # Then it stops within seconds, publishes nothing and leaves the active version
    run = _until(
        ml, url, lambda r: r["status"] == "cancelled", timeout=60, what="the cancel", worker=worker
    )
    print(f"cancel latency: {time.monotonic() - asked:.1f} s")
    assert not ModelVersion.objects.filter(training_run_id=run["id"]).exists()
    assert list(ModelVersion.objects.filter(is_active=True)) == [active]
    assert not training_attempt_dir(TrainingRun.objects.get(pk=run["id"])).exists()
    assert run["phase"]["eta_seconds"] is None and run["phase"]["rate"] is None


def test_a_killed_workers_run_reads_as_lost_within_a_minute_and_its_retry_runs(
    celery_workers: WorkerFactory,
    short_heartbeat: dict[str, str],
    arithmetic_project: Any,
    make_member: Any,
    client_for: Any,
    tiny_bert_dir: Path,
    endless_runs_allowed: None,
) -> None:
    # Given a run training on a worker
    project = arithmetic_project
    worker = celery_workers.start(env=short_heartbeat)
    ml = client_for(make_member(project, "ml"))
    settings = tiny_settings(tiny_bert_dir, head_epochs=1_000_000)
    started = ml.post(f"/api/v1/projects/{project.pk}/training-runs/", settings, format="json")
    url = f"/api/v1/training-runs/{started.json()['id']}/"
    _until(ml, url, lambda r: _training(r["phase"]), timeout=240, what="training", worker=worker)

    # When the worker is killed (no warm shutdown: as the kernel's OOM killer does)
    worker.kill()
    killed = time.monotonic()

    # Then reading the run shows it lost, once its heartbeat is stale
    run = _until(ml, url, lambda r: r["status"] == "failed", timeout=60, what="reap", worker=worker)
    print(f"shown lost {time.monotonic() - killed:.1f} s after the kill")
    assert run["error"].startswith("Worker lost: trn-worker@"), run["error"]

    # When ML staff retry it
    retried = ml.post(f"{url}retry/")

    # Then a new run with the same settings is queued, and the next worker runs it
    assert retried.status_code == 201, retried.content
    retry = retried.json()
    assert (retry["status"], retry["retry_of"], retry["settings"]) == (
        "queued",
        run["id"],
        settings,
    )
    assert ml.post(f"{url}retry/").status_code == 201  # a failed run may be retried again
    assert ml.post(f"/api/v1/training-runs/{retry['id']}/retry/").status_code == 400  # queued
    second = celery_workers.start(name="trn-worker-2@%h", env=short_heartbeat)
    retry_url = f"/api/v1/training-runs/{retry['id']}/"
    retry = _until(
        ml, retry_url, lambda r: _training(r["phase"]), timeout=240, what="retry", worker=second
    )
    assert retry["worker"].startswith("trn-worker-2@")
    assert ml.post(f"{retry_url}cancel/").status_code == 200


def _unlabeled_chains(project: Any, count: int) -> list[int]:
    """``count`` unlabeled three-step chains, written in bulk."""
    problems = Problem.objects.bulk_create(
        [
            Problem(
                project=project,
                text=f"What is {i} times 3, plus 4?",
                content_hash=hashlib.sha256(f"bulk-problem-{i}".encode()).hexdigest(),
            )
            for i in range(count)
        ]
    )
    chains = Chain.objects.bulk_create(
        [
            Chain(
                project=project,
                problem=problem,
                content_hash=hashlib.sha256(f"bulk-chain-{i}".encode()).hexdigest(),
                final_answer=str(3 * i + 4),
                step_count=3,
            )
            for i, problem in enumerate(problems)
        ]
    )
    Step.objects.bulk_create(
        [
            Step(chain=chain, index=k, text=text)
            for i, chain in enumerate(chains)
            for k, text in enumerate(
                [f"{i} times 3 is {3 * i}.", f"{3 * i} plus 4 is {3 * i + 4}.", "Done."]
            )
        ]
    )
    return [chain.pk for chain in chains]


def test_a_scoring_run_counts_its_steps_and_a_cancel_keeps_the_queue_order(
    celery_workers: WorkerFactory,
    arithmetic_project: Any,
    make_member: Any,
    client_for: Any,
    tmp_path: Path,
) -> None:
    # Given an active version on the bundled MiniLM (trained here, in this process) and
    # 1,500 more unlabeled chains: enough steps to take the worker a while
    from annotation.datasets.snapshots import snapshot_create
    from annotation.models import SnapshotSplit
    from prm_training.ml.config import PRMConfig
    from prm_training.ml.launch import train_prm
    from prm_training.services.examples import snapshot_chain_examples

    project = arithmetic_project
    snapshot = snapshot_create(project=project, finished_only=False)
    examples = snapshot_chain_examples(snapshot=snapshot, split=SnapshotSplit.TRAIN)
    config = PRMConfig(head_epochs=5, max_length=64, device="cpu", report_every_s=0.0)
    train_prm(config, examples, [], tmp_path / "minilm")
    version = ModelVersion.objects.create(
        project=project,
        training_run=TrainingRun.objects.create(project=project, status=RunStatus.SUCCEEDED),
        snapshot=snapshot,
        version=1,
        checkpoint_dir=str(tmp_path / "minilm"),
        is_active=True,
    )
    _unlabeled_chains(project, 1_500)
    worker = celery_workers.start()
    ml = client_for(make_member(project, "ml"))

    # When ML staff score the unlabeled chains
    started = ml.post(f"/api/v1/projects/{project.pk}/scoring-runs/", {}, format="json")
    assert started.status_code == 201 and started.json()["status"] == "queued"
    url = f"/api/v1/scoring-runs/{started.json()['id']}/"

    # Then the worker counts the steps it scores, with a rate and an ETA
    def scoring(run: dict[str, Any]) -> bool:
        phase = run["phase"]
        return bool(phase) and phase["name"] == "scoring" and phase["rate"] is not None

    run = _until(ml, url, scoring, timeout=240, what="the scoring phase", worker=worker)
    phase = run["phase"]
    assert phase["unit"] == "steps" and phase["total"] == 3 * (1_500 + 20)
    assert phase["detail"].endswith(" chains") and phase["eta_seconds"] is not None
    assert run["model_version"] == version.pk and run["chains_total"] == 1_520

    # When they cancel it
    asked = time.monotonic()
    assert ml.post(f"{url}cancel/").status_code == 200

    # Then it stops within seconds, and the queue keeps its order: no priority was written
    run = _until(
        ml, url, lambda r: r["status"] == "cancelled", timeout=60, what="the cancel", worker=worker
    )
    print(f"cancel latency: {time.monotonic() - asked:.1f} s")
    assert run["priorities_updated"] == 0
    assert set(Chain.objects.filter(project=project).values_list("priority", flat=True)) == {0.0}
    assert ScoringRun.objects.get(pk=run["id"]).chains_scored < 1_520
    # And it can be retried with the same settings
    retry = ml.post(f"{url}retry/").json()
    assert (retry["retry_of"], retry["strategy"], retry["model_version"]) == (
        run["id"],
        run["strategy"],
        version.pk,
    )
