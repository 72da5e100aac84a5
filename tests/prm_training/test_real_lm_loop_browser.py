"""The machine-label loop on a real language model, as a lab runs it: the packaged
Qwen2.5-Coder-0.5B-Instruct (``requirements/language-model.txt``, converted by `make
install` into the backbone root) on the production workers (``config.workers``), in
Debian's chromium. A lead uploads problems on the import page and, from the ML page's
form, samples chains, rolls out from their steps and asks the model to judge them, with
no terminal; an annotator then verifies the Monte-Carlo verdicts in the workspace. Slow
on a CPU (about 2 tokens/s at batch 1 on this machine kind), so it runs once, on one
problem, with small token budgets: the point is real text through every stage (chat
template, stop tokens, step splitting, answer extraction), not the verdicts' quality,
which BENCHMARKS.md measures (bench/bench_machine_sources.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect
from prm_worker import WorkerFactory, wait_until

from annotation.models import (
    Annotation,
    Chain,
    LabelingMode,
    MachineLabel,
    MachineSource,
    PrelabelOutcome,
)
from prm_training.models import JudgeSample, MachineLabelRun, RunStatus
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


def _boxes(page: Page, selector: str) -> list[dict[str, float]]:
    return page.eval_on_selector_all(
        selector,
        "nodes => nodes.map(n => { const r = n.getBoundingClientRect(); "
        "return {x: r.x, width: r.width, inside: n.scrollWidth <= n.clientWidth}; })",
    )


def _run_finished(kind: str, worker: Any) -> MachineLabelRun:
    """The project's latest run of ``kind`` once it ends; it must have succeeded."""

    def done() -> bool:
        run = MachineLabelRun.objects.filter(kind=kind).order_by("-pk").first()
        return run is not None and run.status not in (RunStatus.QUEUED, RunStatus.RUNNING)

    wait_until(done, timeout=900, what=f"the {kind} run", diagnose=lambda: worker.output()[-6000:])
    run = MachineLabelRun.objects.filter(kind=kind).latest("pk")
    assert run.status == RunStatus.SUCCEEDED, (run.error, worker.output()[-4000:])
    return run


def _start(page: Page, worker: Any, kind: str, fields: dict[str, str]) -> MachineLabelRun:
    """The lead starts a run of ``kind`` from the ML page's form, with ``fields`` typed
    in, and sees it succeed in the runs' table."""
    form = page.locator("#machine-label-form")
    form.locator("select[name=kind]").select_option(kind)
    form.locator("select[name=model]").select_option(LM)
    for name, value in fields.items():
        field = form.locator(f"[name={name}]")
        if field.evaluate("node => node.tagName") == "SELECT":
            field.select_option(value)
        else:
            field.fill(value)
    form.locator("button[type=submit]").click()
    expect(page.locator("#machine-label-message")).to_contain_text("run #")
    run = _run_finished(kind, worker)
    row = page.locator("#machine-label-table tbody tr").filter(has_text=f"#{run.pk} {kind}")
    expect(row.locator(".status-succeeded")).to_have_text("succeeded", timeout=30_000)
    return run


def test_a_lead_samples_rolls_out_and_judges_and_an_annotator_verifies(
    real_lm_root: Path,
    celery_workers: WorkerFactory,
    project: Any,
    make_member: Any,
    live_server: Any,
    browser: Browser,
    tmp_path: Path,
) -> None:
    # Given a project that shows the Monte-Carlo verdicts to its annotators (as the demo's
    # machine-label project does), a problems file, and a node's workers
    project.labeling_mode = LabelingMode.ALL_STEPS
    project.prelabels, project.prelabel_source, project.prelabel_holdout = True, "monte_carlo", 0.0
    project.save()
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"problem": PROBLEM[0], "answer": PROBLEM[1]}) + "\n")
    worker = celery_workers.start()
    lead = make_member(project, "lead")
    ARTIFACTS.mkdir(exist_ok=True)
    with page_watched(browser=browser, width=1366, height=768, csp_errors=True) as page:
        page_signed_in(page=page, base_url=live_server.url, user=lead)

        # When the lead uploads the problems on the import page
        page.goto(f"{live_server.url}/projects/{project.pk}/import/")
        page.locator("#im-file").set_input_files(str(problems))
        page.locator("#im-start").click()
        expect(page.locator("#im-message.ok")).to_have_text(
            "problems.jsonl was imported: 1 problems (0 already here).", timeout=60_000
        )

        # And samples a chain with the real model from the ML page (greedy: its answer to
        # this problem is short and boxed, well inside the budget)
        page.goto(f"{live_server.url}/projects/{project.pk}/models/")
        sampled = {"n": "1", "temperature": "0", "max_new_tokens": "200"}
        _start(page, worker, "sample", {**sampled, "filter": "without_chains"})

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
        rollout = {"n": "1", "max_new_tokens": "40", "mode": "full", "filter": "all"}
        rolled = _start(page, worker, "rollout", rollout)

        # Then every step of every chain has its Monte-Carlo value
        values = MachineLabel.objects.filter(source=MachineSource.MONTE_CARLO, run_id=rolled.pk)
        steps = chains[0].step_count
        assert values.count() == steps and rolled.completions == steps

        # When it asks the model to judge them, in ProcessBench's template
        judge = {"n": "1", "temperature": "0", "max_new_tokens": "48", "filter": "all"}
        judged = _start(page, worker, "judge", judge)
        page.locator("#machine-labels").screenshot(path=str(ARTIFACTS / "real-lm-runs.png"))

        # Then every critique is kept, parsed or not
        samples = JudgeSample.objects.filter(run_id=judged.pk)
        assert samples.count() == 1 and samples.get().text.strip()

    # When an annotator opens the workspace and accepts the Monte-Carlo verdicts
    annotator = make_member(project, "annotator")
    with page_watched(browser=browser, width=1366, height=768, csp_errors=True) as page:
        page_signed_in(page=page, base_url=live_server.url, user=annotator)
        workspace_open(page=page, base_url=live_server.url, project_id=project.pk)
        expect(page.locator("#prelabel-source")).to_have_text("Monte-Carlo")
        shown = page.locator("#steps .ws-step")
        expect(page.locator("#steps .ws-prelabel")).to_have_count(shown.count())
        # The widest source's verdict keeps clear of the comment button, every pill as wide
        first = page.locator("#steps .ws-step").first
        first.hover()
        pencil = first.locator(".ws-comment-btn").bounding_box()
        words = first.locator(".ws-prelabel-source").bounding_box()
        assert pencil and words and pencil["x"] + pencil["width"] <= words["x"], (pencil, words)
        pills = _boxes(page, "#steps .ws-prelabel")
        assert all(box["inside"] for box in pills), pills
        assert len({round(box["width"]) for box in pills}) == 1, pills
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
