"""Machine-label runs on a real Celery worker on the gpu queue (Redis, PostgreSQL), end to
end through the API as a lead uses it: problems imported from a problems file, a sampling
run with a tiny causal LM that imports its chains, a rollout run that values their steps,
and a judge run whose unparseable answers are kept as samples and never become labels."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from prm_worker import WorkerFactory, wait_until

from annotation.datasets.imports import chain_import
from annotation.models import Chain, MachineLabel, MachineSource
from prm_training.models import JudgeSample
from tests.prm_training.lm_fixtures import LM, lm_root, tiny_lm_dir  # noqa: F401 - fixtures

pytestmark = [pytest.mark.redis, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _finished(client: Any, run_id: int, worker: Any) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def done() -> bool:
        response = client.get(f"/api/v1/machine-label-runs/{run_id}/")
        assert response.status_code == 200, response.content
        seen.update(response.json())
        return seen["status"] not in ("queued", "running")

    wait_until(
        done, timeout=300, what=f"run {run_id}", diagnose=lambda: f"{seen}\n{worker.output()}"
    )
    return seen


def test_sampling_rollouts_and_a_judge_run_on_the_gpu_worker(
    lm_root: Any,  # noqa: F811 - before the worker, whose environment inherits the root
    celery_workers: WorkerFactory,
    project: Any,
    make_member: Any,
    client_for: Any,
) -> None:
    # Given: two problems imported from a problems file, a worker, a lead
    data = "".join(
        json.dumps({"problem": text, "answer": answer}) + "\n"
        for text, answer in (("What is 1 + 1?", "2"), ("What is 2 + 3?", "5"))
    )
    chain_import(project=project, path=io.BytesIO(data.encode()), fmt="problems")
    worker = celery_workers.start()
    lead = client_for(make_member(project, "lead"))
    url = f"/api/v1/projects/{project.pk}/machine-label-runs/"
    short = {"n": 2, "max_new_tokens": 6, "temperature": 1.0, "model": LM}

    # When: the lead samples two chains per problem
    started = lead.post(url, {"kind": "sample", "filter": "without_chains", **short}, format="json")
    assert started.status_code == 201, started.content
    assert started.json()["status"] == "queued"
    sample = _finished(lead, started.json()["id"], worker)

    # Then: the worker imported them, with the model and the run as provenance
    assert sample["status"] == "succeeded", sample["error"]
    assert (sample["items_done"], sample["completions"]) == (2, 4)
    chains = Chain.objects.filter(project=project)
    assert chains.exists()
    assert set(chains.values_list("generator", flat=True)) == {LM}
    assert {c.meta["sampling"]["run"] for c in chains} == {sample["id"]}

    # When: it rolls out every step of those chains
    started = lead.post(url, {"kind": "rollout", "filter": "all", **short}, format="json")
    assert started.status_code == 201, started.content
    rollout = _finished(lead, started.json()["id"], worker)

    # Then: each step has its Monte-Carlo value
    assert rollout["status"] == "succeeded", rollout["error"]
    steps = sum(chains.values_list("step_count", flat=True))
    values = MachineLabel.objects.filter(source=MachineSource.MONTE_CARLO, run_id=rollout["id"])
    assert values.count() == steps == rollout["result"]["labels"]
    assert rollout["completions"] == 2 * steps

    # When: it asks the (untrained) LM to judge them
    started = lead.post(url, {"kind": "judge", "filter": "all", **short}, format="json")
    assert started.status_code == 201, started.content
    judge = _finished(lead, started.json()["id"], worker)

    # Then: every sample is kept; random words parse as no verdict, and give no label
    assert judge["status"] == "succeeded", judge["error"]
    samples = JudgeSample.objects.filter(run_id=judge["id"])
    assert samples.count() == 2 * chains.count() == judge["result"]["samples"]
    assert judge["result"]["unparsed"] == samples.filter(verdict__isnull=True).count()
    labels = MachineLabel.objects.filter(source=MachineSource.JUDGE, run_id=judge["id"])
    assert labels.count() == judge["result"]["labels"]
    if judge["result"]["unparsed"] == samples.count():
        assert not labels.exists()
