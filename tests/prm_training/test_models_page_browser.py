"""The ML page in a real browser (Debian's chromium, Playwright, under the site's
Content-Security-Policy): each model version says plainly whether it beats the rules
that read no step, and a run's backbone is chosen from the listed ones."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from annotation.models import Role, Snapshot
from prm_training.models import ModelVersion, RunStatus, TrainingRun
from tests.browser import ARTIFACTS, chromium_running, page_login, page_watched
from tests.factories import MembershipFactory, ProjectFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=1366, height=768) as opened:
        yield opened


def _version(project: Any, number: int, metrics: dict[str, float]) -> ModelVersion:
    snapshot = Snapshot.objects.create(project=project, version=number, content_hash=f"h{number}")
    return ModelVersion.objects.create(
        project=project,
        training_run=TrainingRun.objects.create(project=project, status=RunStatus.SUCCEEDED),
        snapshot=snapshot,
        version=number,
        checkpoint_dir="/nonexistent",
        metrics=metrics,
    )


def test_each_version_says_whether_it_beats_the_rules(live_server: Any, page: Page) -> None:
    # Given: v1 below the outcome rule, v2 above both rules, v3 trained without them
    project = ProjectFactory()
    ml = MembershipFactory(project=project, role=Role.ML).user
    rules = {
        "baseline_outcome_rule_processbench_f1": 0.262,
        "baseline_position_prior_processbench_f1": 0.118,
    }
    _version(project, 1, {"processbench_f1": 0.231, "step_auroc": 0.63, **rules})
    _version(project, 2, {"processbench_f1": 0.301, "step_auroc": 0.71, **rules})
    _version(project, 3, {"processbench_f1": 0.25})
    page_login(page=page, base_url=live_server.url, username=ml.username)

    # When: ML staff open the ML page
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")
    page.wait_for_selector("#versions-table tbody tr:nth-child(3)")

    # Then: each version's row says it, against the best rule, with that rule's F1
    cells = {
        row.query_selector("td").inner_text(): row.query_selector("td:nth-child(6)").inner_text()
        for row in page.query_selector_all("#versions-table tbody tr")
    }
    assert cells == {
        "v1": "does not beat the outcome rule (F1 0.262)",
        "v2": "beats the outcome rule (F1 0.262)",
        "v3": "—",
    }
    # And the backbone is chosen from the listed ones (the backbone root holds "bert")
    options = page.locator("#train-form select[name=backbone] option").all_inner_texts()
    assert options == ["all-MiniLM-L6-v2 (bundled)", "bert"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "models-versions-against-rules.png"), full_page=True)
