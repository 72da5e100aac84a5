"""The ML page's evaluation sets in a real browser (chromium, Playwright, the site's CSP):
a lead holds an import out, and each version's figures on each set read per subset,
against the strongest baseline that reads no step, with intervals."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from playwright.sync_api import Browser, Page, expect

from annotation.datasets.evaluation_sets import evaluation_set_mark
from annotation.models import EvaluationSet, Role, Snapshot
from prm_training.ml.data import ChainExample
from prm_training.ml.evaluation import evaluation_report
from prm_training.ml.readout import Readout
from prm_training.models import EvaluationResult, ModelVersion, RunStatus, TrainingRun
from tests.browser import ARTIFACTS, chromium_running, page_login, page_watched
from tests.factories import ChainFactory, ImportBatchFactory, MembershipFactory, ProjectFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=1366, height=900) as opened:
        yield opened


def _report() -> dict[str, Any]:
    """A real report (ml.evaluation) on 80 synthetic chains of two subsets: the model finds
    most first errors, the baseline guesses."""
    rng = np.random.default_rng(0)
    examples, model, prior = [], [], []
    for i in range(80):
        error = int(rng.integers(0, 4)) if i % 2 else None
        labels = tuple(1 if error is None or k < error else -1 for k in range(4))
        labels = labels[: (error + 1) if error is not None else 4]
        steps = tuple(f"step {k}" for k in range(len(labels)))
        examples.append(
            ChainExample(i, f"problem {i}", steps, labels, subset="gsm8k" if i < 40 else "math")
        )
        hit = rng.random() < 0.8
        model.append([0.9 if (r == 1) == hit else 0.1 for r in labels])
        prior.append(rng.random(len(labels)).tolist())
    return evaluation_report(
        examples,
        {"model": (model, Readout(0.5)), "outcome_rule": (prior, Readout(0.5))},
        resamples=200,
    )


def test_a_lead_holds_out_an_import_and_reads_each_versions_figures(
    live_server: Any, page: Page
) -> None:
    # Given a project with v1 measured on an evaluation set, and another import not marked
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    marked = ImportBatchFactory(project=project, filename="processbench-gsm8k-math.jsonl")
    ChainFactory(project=project, import_batch=marked)
    held = evaluation_set_mark(project=project, import_batch_id=marked.pk, name="unseen")
    unmarked = ImportBatchFactory(project=project, filename="olympiad.jsonl", chains_created=2)
    for _ in range(2):
        ChainFactory(project=project, import_batch=unmarked)
    version = ModelVersion.objects.create(
        project=project,
        training_run=TrainingRun.objects.create(project=project, status=RunStatus.SUCCEEDED),
        snapshot=Snapshot.objects.create(project=project, version=1, content_hash="s1"),
        version=1,
        checkpoint_dir="/nonexistent",
        metrics={},
    )
    report = _report()
    EvaluationResult.objects.create(
        model_version=version,
        evaluation_set=held,
        chains=80,
        unlabeled_chains=3,
        report=report,
        truncation={"truncated_chains": 2.0},
        loses=False,
    )
    page_login(page=page, base_url=live_server.url, username=lead.username)

    # When the lead opens the ML page
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")
    rows = page.locator("#evaluation-results-table tbody tr")
    expect(rows).to_have_count(3)

    # Then v1 reads per subset and over their mean, against the strongest baseline
    cells = [row.locator("td").all_inner_texts() for row in rows.all()]
    assert [c[2] for c in cells] == ["gsm8k", "math", "mean over subsets"]
    gsm8k = report["scores"]["model"]["subset_f1:gsm8k"]
    assert cells[0][4] == f"{gsm8k['mean']:.3f} [{gsm8k['low']:.3f}, {gsm8k['high']:.3f}]"
    assert cells[0][5] == "outcome rule"
    assert cells[2][4].startswith(f"{report['scores']['model']['mean_subset_f1']['mean']:.3f} [")
    assert cells[2][7].startswith("+") and cells[2][8] == "does not lose"
    assert "3 chains without labels · 2 chains cut to fit max_length · AUROC" in cells[0][1]

    # And when the lead holds out the other import
    page.select_option("#evaluation-set-form select[name=import_batch]", str(unmarked.pk))
    page.click("#evaluation-set-form button[type=submit]")
    expect(page.locator("#evaluation-set-message")).to_have_text(
        "olympiad.jsonl: 2 chains held out."
    )
    # Then both sets are listed and the second's chains are held out
    expect(page.locator("#evaluation-sets-table tbody tr")).to_have_count(2)
    assert EvaluationSet.objects.get(import_batch=unmarked).chains.count() == 2
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#evaluation-sets").screenshot(path=str(ARTIFACTS / "models-evaluation-sets.png"))
