"""The ML page's machine-label section in a real browser: a lead starts a sampling run
from the form (the model chosen from the causal LMs under the backbone root), its message
follows the queued run, and the runs' table shows what each generated and wrote."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from annotation.models import Role
from prm_training.models import MachineLabelRun, RunStatus
from tests.browser import ARTIFACTS, chromium_running, page_login, page_overflow, page_watched
from tests.factories import MembershipFactory, ProblemFactory, ProjectFactory
from tests.prm_training.lm_fixtures import LM, lm_root, tiny_lm_dir  # noqa: F401 - fixtures

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("lm_root"),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=1366, height=768) as opened:
        yield opened


def test_a_lead_starts_a_sampling_run_and_sees_the_runs(live_server: Any, page: Page) -> None:
    # Given: a project with two problems and a judge run that finished with unparsed answers
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    for _ in range(2):
        ProblemFactory(project=project, reference_answer="4")
    MachineLabelRun.objects.create(
        project=project,
        kind="judge",
        model_name=LM,
        status=RunStatus.SUCCEEDED,
        params={"n": 4, "temperature": 0.7, "top_p": 0.95, "max_new_tokens": 512, "seed": 0},
        items_total=3,
        items_done=3,
        completions=12,
        tokens=2048,
        result={"samples": 12, "unparsed": 5, "labels": 6},
    )
    MachineLabelRun.objects.create(
        project=project,
        kind="sample",
        model_name=LM,
        status=RunStatus.SUCCEEDED,
        params={"n": 1, "temperature": 0.0, "top_p": 0.95, "max_new_tokens": 512, "seed": 0},
        items_total=1,
        items_done=1,
        completions=1,
        tokens=1,
        result={"chains_created": 1, "graded": 1, "correct": 1},
    )
    page_login(page=page, base_url=live_server.url, username=lead.username)

    # When: the lead opens the ML page and starts a sampling run of 3 chains per problem
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")
    form = page.locator("#machine-label-form")
    assert form.locator("select[name=model] option").all_inner_texts() == [LM]
    form.locator("select[name=kind]").select_option("sample")
    form.locator("input[name=n]").fill("3")
    form.locator("select[name=filter]").select_option("without_chains")
    form.locator("button[type=submit]").click()

    # Then: the message follows the queued run, and the table lists both runs
    rows = page.locator("#machine-label-table tbody tr")
    expect(rows).to_have_count(3)
    started = MachineLabelRun.objects.latest("pk")
    expect(page.locator("#machine-label-message")).to_have_text(f"Sample run #{started.pk} queued.")
    assert (started.kind, started.params["n"], started.item_ids) == (
        "sample",
        3,
        sorted(project.problems.values_list("pk", flat=True)),
    )
    first = rows.nth(0).locator("td")
    assert first.nth(0).inner_text() == f"#{started.pk} sample\n0/2 problems"
    assert first.nth(1).inner_text() == f"{LM}\nn=3, T=0.7, top-p=0.95, ≤512 tokens, seed 0"
    judge = rows.nth(2).locator("td")
    expect(judge.nth(4)).to_have_text("12 completions, 2,048 tokens")
    expect(judge.nth(5)).to_have_text("6 step labels, 12 judge samples, 5 unparsed")
    one = rows.nth(1).locator("td")  # counts of one read in the singular
    expect(one.nth(0)).to_contain_text("1/1 problem")
    expect(one.nth(4)).to_have_text("1 completion, 1 token")
    expect(one.nth(5)).to_have_text("1 chain imported, 1/1 answers right")
    assert page_overflow(page) == []
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#machine-labels").screenshot(path=str(ARTIFACTS / "models-machine-labels.png"))

    # And: a bad start says why, naming the field
    form.locator("select[name=filter]").select_option("ids")
    form.locator("input[name=ids]").fill("999999")
    form.locator("button[type=submit]").click()
    expect(page.locator("#machine-label-message")).to_contain_text("Not problems of this project")


def test_ml_staff_write_the_project_s_judge_template(live_server: Any, page: Page) -> None:
    # Given: ML staff on the ML page of a project with no template of its own
    project = ProjectFactory()
    ml = MembershipFactory(project=project, role=Role.ML).user
    page_login(page=page, base_url=live_server.url, username=ml.username)
    page.goto(f"{live_server.url}/projects/{project.pk}/models/")
    form = page.locator("#settings-form")
    template = form.locator("textarea[name=judge_template]")
    expect(template).to_have_value("")

    # When: they write one that names a field the judge does not fill, then a good one
    template.fill("Judge {steps}")
    form.locator("button[type=submit]").click()
    expect(page.locator("#settings-message")).to_contain_text("{tagged_response}")
    template.fill("{problem}\n{tagged_response}\nThe earliest wrong step in \\boxed{{}}.")
    form.locator("button[type=submit]").click()

    # Then: the good one is saved, and shown again on the next visit
    expect(page.locator("#settings-message")).to_have_text("Saved.")
    page.reload()
    expect(page.locator("#settings-form textarea[name=judge_template]")).to_have_value(
        "{problem}\n{tagged_response}\nThe earliest wrong step in \\boxed{{}}."
    )
    form.screenshot(path=str(ARTIFACTS / "models-judge-template.png"))
