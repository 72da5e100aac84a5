"""The ML page's refreshes in a real browser (chromium, Playwright, the site's CSP): a
refresh that answers after a newer one began draws nothing, so an older answer never puts
back what an action just changed: an activation (models.js) and an unmarked evaluation
set (evaluation_sets.js). ``AnswerHeld`` holds the older answer back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from annotation.datasets.evaluation_sets import evaluation_set_mark
from annotation.models import Role
from prm_training.models import ModelVersion, RunStatus, TrainingRun
from tests.browser import AnswerHeld, chromium_running, page_login, page_watched
from tests.factories import ChainFactory, ImportBatchFactory, MembershipFactory, ProjectFactory
from tests.prm_training.evaluation_versions import stored_version

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=1366, height=900, csp_errors=True) as opened:
        yield opened


def test_an_activation_is_not_undone_by_an_older_refresh(live_server: Any, page: Page) -> None:
    # Given: v1 active, v2 not, and a finished run whose loss curve can be chosen
    project = ProjectFactory()
    ml = MembershipFactory(project=project, role=Role.ML).user
    first = stored_version(project, 1)
    ModelVersion.objects.filter(pk=first.pk).update(is_active=True)
    second = stored_version(project, 2)
    done = TrainingRun.objects.create(
        project=project, status=RunStatus.SUCCEEDED, last_loss=0.3, loss_history=[0.9, 0.3]
    )
    page_login(page=page, base_url=live_server.url, username=ml.username)
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")
    activate = page.locator("#versions-table").get_by_role("button", name="Activate")
    activate.wait_for()

    # When: choosing the run's curve refreshes the page, its versions' answer (v1 active)
    # held back...
    older = AnswerHeld(page, r".*/model-versions/$")
    page.get_by_title(f"Show run #{done.pk}'s loss curve").click()
    older.wait()
    # ...while v2 is activated and the page refreshes again
    page.once("dialog", lambda dialog: dialog.accept())
    activate.click()
    newest = page.locator("#versions-table tbody tr").first
    expect(newest).to_contain_text("active")
    older.release()

    # Then: the older answer is dropped: v2 still reads active
    expect(newest).to_contain_text("active")
    expect(page.locator("#versions-table").get_by_role("button", name="Activate")).to_have_count(1)
    second.refresh_from_db()
    assert second.is_active


def test_an_unmarked_set_does_not_come_back_with_an_older_refresh(
    live_server: Any, page: Page
) -> None:
    # Given: two evaluation sets on the lead's ML page
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    for name in ("gsm8k", "math"):
        batch = ImportBatchFactory(project=project, filename=f"{name}.jsonl")
        ChainFactory(project=project, import_batch=batch)
        evaluation_set_mark(project=project, import_batch_id=batch.pk, name=name)
    page_login(page=page, base_url=live_server.url, username=lead.username)
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")
    rows = page.locator("#evaluation-sets-table tbody tr")
    expect(rows).to_have_count(2)
    unmark = page.locator("#evaluation-sets-table").get_by_role("button", name="Unmark")

    # When: the lead unmarks one set, the refresh's answer (one set left) is held back...
    older = AnswerHeld(page, r".*/evaluation-sets/$")
    page.once("dialog", lambda dialog: dialog.accept())
    unmark.first.click()
    older.wait()
    # ...and unmarks the other, whose refresh shows none
    page.once("dialog", lambda dialog: dialog.accept())
    unmark.last.click()
    expect(page.locator("#evaluation-sets-table")).to_contain_text("No evaluation sets")
    older.release()

    # Then: the older answer is dropped: no set comes back
    expect(page.locator("#evaluation-sets-table")).to_contain_text("No evaluation sets")
    expect(unmark).to_have_count(0)
