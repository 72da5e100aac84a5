"""The machine-label loop on a real language model, as a lab runs it: the packaged
Qwen2.5-Coder-0.5B-Instruct (``requirements/language-model.txt``, converted by `make
install` into the backbone root) on the production workers (``config.workers``). A lead
imports problems, samples chains, rolls out from their steps and asks the model to judge
them; an annotator then verifies the Monte-Carlo verdicts in the workspace, in Debian's
chromium. Slow on a CPU (about 2 tokens/s at batch 1 on this machine kind), so it runs
once, on one problem, with small token budgets: the point is real text through every
stage (chat template, stop tokens, step splitting, answer extraction), not the verdicts'
quality, which BENCHMARKS.md measures (bench/bench_machine_sources.py)."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect
from prm_worker import WorkerFactory, wait_until

from annotation.datasets.imports import chain_import
from annotation.models import (
    Annotation,
    Chain,
    LabelingMode,
    MachineLabel,
    MachineSource,
    PrelabelOutcome,
)
from prm_training.models import JudgeSample
from tests.browser import ARTIFACTS, chromium_running, page_signed_in, page_watched, workspace_open
from tests.conftest import REPO_ROOT

pytestmark = [
    pytest.mark.real_lm,
    pytest.mark.redis,
    pytest.mark.slow,
    pytest.mark.timeout(1500),
    pytest.mark.django_db(transaction=True),
]

LM = "Qwen2.5-Coder-0.5B-Instruct"
PROBLEM = ("Tom has 3 apples and buys 4 more. How many apples does he have now?", "7")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


@pytest.fixture
def real_lm_root(monkeypatch: pytest.MonkeyPatch) -> Path:
    """The backbone root `make install` put the packaged model in (the workers inherit
    it). Missing: skipped on a developer's machine, a failure in CI."""
    root = Path(os.environ.get("STEPLAB_REAL_LM_ROOT") or REPO_ROOT / "var" / "backbones")
    if not (root / LM / "config.json").is_file():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{root / LM} is missing: `make install` converts it")
        pytest.skip(f"{root / LM} is missing: run `make install`")
    monkeypatch.setenv("STEPLAB_BACKBONE_DIR", str(root))
    return root


def _finished(client: Any, run_id: int, worker: Any) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def done() -> bool:
        seen.update(client.get(f"/api/v1/machine-label-runs/{run_id}/").json())
        return seen["status"] not in ("queued", "running")

    wait_until(done, timeout=900, what=f"run {run_id}", diagnose=lambda: worker.output()[-6000:])
    assert seen["status"] == "succeeded", (seen["error"], worker.output()[-4000:])
    return seen


def test_a_lead_samples_rolls_out_and_judges_and_an_annotator_verifies(
    real_lm_root: Path,
    celery_workers: WorkerFactory,
    project: Any,
    make_member: Any,
    client_for: Any,
    live_server: Any,
    browser: Browser,
) -> None:
    # Given a project that shows the Monte-Carlo verdicts to its annotators, a problem
    # from a problems file, and a node's workers
    project.labeling_mode = LabelingMode.ALL_STEPS
    project.prelabels, project.prelabel_source, project.prelabel_holdout = True, "monte_carlo", 0.0
    project.save()
    data = json.dumps({"problem": PROBLEM[0], "answer": PROBLEM[1]}) + "\n"
    chain_import(project=project, path=io.BytesIO(data.encode()), fmt="problems")
    worker = celery_workers.start()
    lead = client_for(make_member(project, "lead"))
    url = f"/api/v1/projects/{project.pk}/machine-label-runs/"

    # When the lead samples a chain with the real model (greedy: its answer to this
    # problem is short and boxed, well inside the budget)
    sample = {"kind": "sample", "filter": "without_chains", "model": LM, "n": 1}
    started = lead.post(url, {**sample, "temperature": 0.0, "max_new_tokens": 200}, format="json")
    assert started.status_code == 201, started.content
    _finished(lead, started.json()["id"], worker)

    # Then the chain is the model's own text, ended by its stop token (no chat markup
    # left), split into steps, its final answer read and graded against the reference
    chains = list(Chain.objects.filter(project=project).prefetch_related("steps"))
    assert len(chains) == 1 and chains[0].generator == LM
    texts = [step.text for step in chains[0].steps.all()]
    assert len(texts) >= 2, texts
    assert not any("<|im_end|>" in text or "<|im_start|>" in text for text in texts), texts
    assert chains[0].final_answer == "7", (chains[0].final_answer, texts)
    assert chains[0].meta["final_answer_correct"] is True
    assert chains[0].meta["sampling"]["finished"] is True

    # When it rolls out from every step's prefix (one short rollout a step: the last
    # steps already hold the answer, earlier ones rarely reach it in 40 tokens)
    rollout = {"kind": "rollout", "filter": "all", "model": LM, "n": 1, "mode": "full"}
    started = lead.post(url, {**rollout, "max_new_tokens": 40}, format="json")
    assert started.status_code == 201, started.content
    rolled = _finished(lead, started.json()["id"], worker)

    # Then every step of every chain has its Monte-Carlo value
    values = MachineLabel.objects.filter(source=MachineSource.MONTE_CARLO, run_id=rolled["id"])
    steps = chains[0].step_count
    assert values.count() == steps and rolled["completions"] == steps

    # When it asks the model to judge them, in ProcessBench's template
    judge = {"kind": "judge", "filter": "all", "model": LM, "n": 1, "temperature": 0.0}
    started = lead.post(url, {**judge, "max_new_tokens": 48}, format="json")
    assert started.status_code == 201, started.content
    judged = _finished(lead, started.json()["id"], worker)

    # Then every critique is kept, parsed or not
    samples = JudgeSample.objects.filter(run_id=judged["id"])
    assert samples.count() == 1 and samples.get().text.strip()

    # When an annotator opens the workspace and accepts the Monte-Carlo verdicts
    annotator = make_member(project, "annotator")
    ARTIFACTS.mkdir(exist_ok=True)
    with page_watched(browser=browser, width=1366, height=768, csp_errors=True) as page:
        page_signed_in(page=page, base_url=live_server.url, user=annotator)
        workspace_open(page=page, base_url=live_server.url, project_id=project.pk)
        expect(page.locator("#prelabel-source")).to_have_text("Monte-Carlo")
        shown = page.locator("#steps .ws-step")
        expect(page.locator("#steps .ws-prelabel")).to_have_count(shown.count())
        page.screenshot(path=str(ARTIFACTS / "real-lm-verify.png"), full_page=True)
        page.keyboard.press("v")
        page.keyboard.press("Enter")
        wait_until(
            lambda: Annotation.objects.filter(annotator=annotator).exists(),
            timeout=30,
            what="the verified pass",
            diagnose=lambda: page.content()[-2000:],
        )
        page.screenshot(path=str(ARTIFACTS / "real-lm-next.png"), full_page=True)

    # Then the pass records, step by step, that it confirmed the Monte-Carlo verdicts
    verified = Annotation.objects.get(annotator=annotator)
    outcomes = set(verified.ratings.values_list("prelabel", "prelabel_source"))
    assert outcomes == {(PrelabelOutcome.CONFIRMED, MachineSource.MONTE_CARLO)}
