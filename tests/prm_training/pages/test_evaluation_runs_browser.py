"""The ML page while evaluation runs fill figures, in a real browser (Debian's chromium,
Playwright, the site's CSP): each version's figures say when they were measured and with
which labels; a version without figures on a set reads "scoring…" while a run is queued,
its figures once the run wrote them, and why not when a run could not measure it, with
ML staff's buttons to ask again and to cancel a pending run."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from annotation.datasets.evaluation_sets import evaluation_set_mark_chains
from annotation.models import Role, Snapshot, SnapshotKind
from prm_training.models import (
    EvaluationResult,
    EvaluationRun,
    ModelVersion,
    RunStatus,
    TrainingRun,
)
from prm_training.services.evaluation_runs import CHECKPOINT_GONE
from tests.browser import ARTIFACTS, chromium_running, page_login, page_overflow, page_watched
from tests.factories import (
    ChainFactory,
    MembershipFactory,
    ProjectFactory,
    annotation_with_ratings,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

REPORT = {
    "chains": 8,
    "subsets": [{"name": "gsm8k", "chains": 8}],
    "scores": {
        "model": {
            "subset_f1:gsm8k": {"mean": 0.61, "low": 0.5, "high": 0.7},
            "mean_subset_f1": {"mean": 0.61, "low": 0.5, "high": 0.7},
        }
    },
}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=1366, height=900, csp_errors=True) as opened:
        yield opened


def _version(project: Any, number: int) -> ModelVersion:
    labels = Snapshot.objects.create(
        project=project, kind=SnapshotKind.TRAINING, version=number, content_hash=f"t{number}"
    )
    return ModelVersion.objects.create(
        project=project,
        training_run=TrainingRun.objects.create(project=project, status=RunStatus.SUCCEEDED),
        snapshot=labels,
        version=number,
        checkpoint_dir="/nonexistent",
        metrics={},
    )


def test_a_version_without_figures_reads_scoring_until_a_run_fills_them(
    live_server: Any, page: Page
) -> None:
    # Given v1 measured on "unseen" with t1's labels, then v2 made, and a set marked after
    # both: the marking queued a run, which has not started
    project = ProjectFactory()
    ml = MembershipFactory(project=project, role=Role.ML).user
    first = _version(project, 1)
    unseen = evaluation_set_mark_chains(
        project=project, chain_ids=[ChainFactory(project=project).pk], name="unseen"
    )
    EvaluationRun.objects.all().delete()
    EvaluationResult.objects.create(
        model_version=first,
        evaluation_set=unseen,
        chains=8,
        report=REPORT,
        loses=False,
        snapshot=first.snapshot,
    )
    second = _version(project, 2)
    evaluation_set_mark_chains(
        project=project, chain_ids=[ChainFactory(project=project).pk], name="later"
    )
    [run] = EvaluationRun.objects.filter(status=RunStatus.QUEUED)
    page_login(page=page, base_url=live_server.url, username=ml.username)

    # When ML staff open the ML page
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")
    rows = page.locator("#evaluation-results-table tbody tr")

    # Then v2 and v1 read "scoring…" on the sets they lack, v1 its figures on the other,
    # measured when and with which labels; the run is said to be queued, no button
    expect(rows).to_have_count(5)
    cells = [row.locator("td").all_inner_texts() for row in rows.all()]
    assert [c[:2] for c in cells[:2]] == [["v2", "unseen"], ["v2", "later"]]
    assert cells[0][2] == cells[1][2] == cells[4][2] == "scoring…"
    assert cells[2][0] == "v1" and cells[2][1].startswith("unseen\nmeasured 20")
    assert cells[2][1].endswith("with the labels of t1")
    assert cells[4][:2] == ["v1", "later"]
    expect(page.locator("#evaluation-refill")).to_contain_text("an evaluation run is queued")
    expect(page.locator("#evaluation-refill-start")).to_be_hidden()
    expect(page.locator("#evaluation-refill-cancel")).to_be_visible()
    assert page_overflow(page, 1366) == []
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#evaluation-sets").screenshot(path=str(ARTIFACTS / "models-scoring.png"))

    # When the run writes v2's figures on "unseen" and cannot measure the rest
    EvaluationResult.objects.create(
        model_version=second,
        evaluation_set=unseen,
        chains=8,
        report=REPORT,
        loses=False,
        snapshot=second.snapshot,
    )
    EvaluationRun.objects.filter(pk=run.pk).update(
        status=RunStatus.SUCCEEDED,
        finished_at=timezone.now(),
        filled=1,
        skipped=[
            {"model_version": v.pk, "version": v.version, "reason": CHECKPOINT_GONE}
            for v in (second, first)
        ],
    )

    # Then the page reads them without a reload (it polls while a run is pending)
    expect(rows.first.locator("td").nth(1)).to_contain_text("with the labels of t2")
    gaps = page.locator("#evaluation-results-table tr.evaluation-gap")
    expect(gaps).to_have_count(2)
    expect(gaps.first).to_contain_text(f"not measured: {CHECKPOINT_GONE}")
    expect(page.locator("#evaluation-refill")).to_contain_text(
        re.compile(r"ended 20\d\d-\d\d-\d\d \d\d:\d\d, 1 figure\(s\) written")
    )
    page.locator("#evaluation-sets").screenshot(path=str(ARTIFACTS / "models-not-measured.png"))

    # When ML staff ask for the missing figures again
    page.locator("#evaluation-refill-start").click()

    # Then a run is queued and the gaps read "scoring…" again
    expect(gaps.first).to_contain_text("scoring…")
    asked = EvaluationRun.objects.get(status=RunStatus.QUEUED)
    assert (asked.trigger, asked.started_by_id) == ("manual", ml.pk)

    # When ML staff cancel it (the page asks first)
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#evaluation-refill-cancel").click()

    # Then it is cancelled, the gaps say so, and the button to ask again is back
    expect(page.locator("#evaluation-refill")).to_contain_text("was cancelled")
    expect(gaps.first).to_contain_text("not measured: the last evaluation run was cancelled")
    expect(page.locator("#evaluation-refill-cancel")).to_be_hidden()
    expect(page.locator("#evaluation-refill-start")).to_be_visible()
    assert EvaluationRun.objects.get(pk=asked.pk).status == RunStatus.CANCELLED


def test_figures_on_labels_changed_since_say_so_until_measured_again(
    live_server: Any, page: Page
) -> None:
    # Given v1 measured on a set, then a new pass over one of its chains (its labels
    # changed after v1's snapshot), and no run waiting
    project = ProjectFactory()
    ml = MembershipFactory(project=project, role=Role.ML).user
    first = _version(project, 1)
    chain = ChainFactory(project=project)
    held = evaluation_set_mark_chains(project=project, chain_ids=[chain.pk], name="held")
    EvaluationResult.objects.create(
        model_version=first,
        evaluation_set=held,
        chains=8,
        report=REPORT,
        loses=False,
        snapshot=first.snapshot,
    )
    EvaluationRun.objects.all().delete()
    annotation_with_ratings(chain=chain, labels=[1, -1, None])
    page_login(page=page, base_url=live_server.url, username=ml.username)

    # When ML staff open the ML page
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")

    # Then the figures stay, saying their labels changed since, and ML staff may ask for
    # them to be measured again
    head = page.locator("#evaluation-results-table tbody tr").first.locator("td").nth(1)
    expect(head).to_contain_text("with the labels of t1")
    expect(head).to_contain_text("labels changed since: not yet measured again")
    start = page.locator("#evaluation-refill-start")
    expect(start).to_be_visible()
    page.locator("#evaluation-sets").screenshot(path=str(ARTIFACTS / "models-outdated.png"))

    # When they ask, the figures read as being measured again
    start.click()
    expect(head).to_contain_text("labels changed since: measuring again…")
    assert EvaluationRun.objects.filter(status=RunStatus.QUEUED).count() == 1
