"""Machine labels in a real browser (Debian's chromium driven by Playwright against
pytest-django's live server, under the site's Content-Security-Policy), at 1366x768: the
review page and the data manager's chain page show each machine source's verdicts beside
the people's votes, tagged as machines and never among the voters; the chain list shows
each source's first error and filters the chains where machines disagree. Screenshots go
to tests/artifacts/machine-*.png."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from annotation.models import Chain, Role
from annotation.quality.chain_agreement import chains_agreement_refresh
from tests.browser import ARTIFACTS, page_overflow, page_signed_in, page_watched
from tests.factories import (
    ChainFactory,
    MembershipFactory,
    ProjectFactory,
    annotation_with_ratings,
    machine_labels,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=1366, height=768, csp_errors=True) as opened:
        yield opened


@pytest.fixture
def lab() -> dict[str, Any]:
    """Two annotators disagreeing on step 2 of a chain that three machine sources
    labelled (Monte-Carlo agrees with bob, the judge with ann, the PRM gives values), and
    a quiet chain the rollouts and the judge agree on."""
    project = ProjectFactory(overlap=2)
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    ann = MembershipFactory(project=project, user__username="ann").user
    bob = MembershipFactory(project=project, user__username="bob").user
    disputed = ChainFactory(project=project, step_count=3)
    annotation_with_ratings(chain=disputed, annotator=ann, labels=[1, 1, 1])
    annotation_with_ratings(chain=disputed, annotator=bob, labels=[1, -1, -1])
    machine_labels(
        chain=disputed,
        ratings=[1, -1, -1],
        values=[0.875, 0.0, 0.0],
        detail={"rollouts": 8, "reached": 7},
        model="Qwen2.5-Math-1.5B",
        run_id=3,
    )
    machine_labels(
        chain=disputed, ratings=[1, 1, 1], source="judge", run_kind="judge", model="judge-7b"
    )
    machine_labels(
        chain=disputed,
        ratings=[None, None, None],
        values=[0.9, 0.3, 0.2],
        source="prm",
        run_kind="scoring",
    )
    quiet = ChainFactory(project=project, step_count=3)
    machine_labels(chain=quiet, ratings=[1, 1, -1])
    machine_labels(chain=quiet, ratings=[1, 1, -1], source="judge", run_kind="judge")
    Chain.objects.filter(pk=disputed.pk).update(finished_count=2, is_finished=True)
    chains_agreement_refresh(chains=Chain.objects.filter(project=project))
    return {"project": project, "lead": lead, "disputed": disputed, "quiet": quiet}


def test_review_and_chain_page_show_machine_labels_beside_the_votes(
    live_server: Any, page: Page, lab: dict[str, Any]
) -> None:
    project, disputed = lab["project"], lab["disputed"]
    page_signed_in(page=page, base_url=live_server.url, user=lab["lead"])
    ARTIFACTS.mkdir(exist_ok=True)

    # The review page: the voters are the two people; the machines come after, tagged
    page.goto(f"{live_server.url}/projects/{project.pk}/review/#chain={disputed.pk}")
    page.wait_for_selector("#review[data-state=ready]")
    assert page.locator("#rv-grid thead th .rv-voter").all_text_contents() == ["ann", "bob"]
    machine_head = page.locator("#rv-grid thead th.rv-machine-col")
    assert machine_head.inner_text().split("\n") == ["Machines", "not votes"]
    step2 = page.locator("#rv-grid tbody tr").nth(1)
    lines = step2.locator("td.rv-machine span")
    assert lines.all_text_contents() == ["MC −1 · 0.00", "Judge +1", "PRM 0.30"]
    first = page.locator("#rv-grid tbody tr").first.locator("td.rv-machine span").first
    assert "7 of 8 rollouts reached the answer" in (first.get_attribute("title") or "")
    assert "Qwen2.5-Math-1.5B" in (first.get_attribute("title") or "")
    # The consensus is a tie on step 2 (one vote each): the machines do not break it
    assert step2.locator("td.rv-majority").inner_text() == "tie (+1 / −1)"
    badges = page.locator("#rv-machine .rv-machine-badge")
    assert badges.all_text_contents() == [
        "Monte-Carlo rollouts: step 2",
        "Judge: none",
        "PRM: —",
    ]
    assert page_overflow(page) == []
    page.screenshot(path=str(ARTIFACTS / "machine-review-1366.png"), full_page=True)

    # The chain page: the same columns after the people's, and the first errors in words
    page.goto(f"{live_server.url}/projects/{project.pk}/chains/{disputed.pk}/")
    page.wait_for_selector("#chain[data-state=ready]")
    heads = page.locator("#cp-steps thead th.cp-machine-col .cp-machine-name")
    assert heads.all_text_contents() == ["MC", "Judge", "PRM"]
    assert page.locator("#cp-steps thead th .cp-voter").all_text_contents() == ["ann", "bob"]
    row2 = page.locator("#cp-steps tbody tr").nth(1)
    assert row2.locator("td.cp-machine").all_text_contents() == ["−1 · 0.00", "+1", "0.30"]
    summary = page.locator("#cp-machine").inner_text()
    assert "Monte-Carlo rollouts step 2" in summary and "Judge none" in summary
    assert page_overflow(page) == []
    page.screenshot(path=str(ARTIFACTS / "machine-chain-1366.png"), full_page=True)


def test_chain_list_shows_first_errors_and_filters_machines_disagreeing(
    live_server: Any, page: Page, lab: dict[str, Any]
) -> None:
    project, disputed, quiet = lab["project"], lab["disputed"], lab["quiet"]
    page_signed_in(page=page, base_url=live_server.url, user=lab["lead"])

    page.goto(f"{live_server.url}/projects/{project.pk}/chains/")
    page.wait_for_selector("#chains[data-state=ready]")
    cell = page.locator(f"#ch-rows tr[data-chain='{disputed.pk}'] td.ch-machine")
    assert cell.locator("span").all_text_contents() == ["MC step 2", "Judge none"]
    assert "is-split" in (cell.get_attribute("class") or "")
    calm = page.locator(f"#ch-rows tr[data-chain='{quiet.pk}'] td.ch-machine")
    assert calm.locator("span").all_text_contents() == ["MC step 3", "Judge step 3"]
    assert "is-split" not in (calm.get_attribute("class") or "")
    assert page_overflow(page) == []
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "machine-chains-1366.png"), full_page=True)

    page.select_option("#ch-machines", "disagree")
    page.wait_for_function(
        "() => document.querySelectorAll('#ch-rows tr[data-chain]').length === 1"
    )
    assert page.locator("#ch-rows tr[data-chain]").get_attribute("data-chain") == str(disputed.pk)

    # The quiet chain has no person's pass to disagree with
    page.select_option("#ch-machines", "any")
    page.wait_for_function(
        "() => document.querySelectorAll('#ch-rows tr[data-chain]').length === 2"
    )
    page.select_option("#ch-machines", "vs_people")
    page.wait_for_function(
        "() => document.querySelectorAll('#ch-rows tr[data-chain]').length === 1"
    )
    assert page.locator("#ch-rows tr[data-chain]").get_attribute("data-chain") == str(disputed.pk)


def test_snapshot_form_takes_machine_sources_and_exports_offer_their_options(
    live_server: Any, page: Page, lab: dict[str, Any]
) -> None:
    project = lab["project"]
    page_signed_in(page=page, base_url=live_server.url, user=lab["lead"])
    page.goto(f"{live_server.url}/projects/{project.pk}/snapshots/")
    page.wait_for_selector("#snapshots[data-state=ready]")

    # The lead takes a snapshot with the rollouts' labels
    page.check("#sn-machine input[value=monte_carlo]")
    page.click("#sn-take")
    message = page.locator("#sn-message.ok")
    message.wait_for()
    assert "1 chain labeled by monte_carlo" in message.inner_text()
    row = page.locator("#sn-datasets tbody tr").first
    assert "machine: monte_carlo" in row.locator(".sn-options").inner_text()

    # Math-Shepherd from the hard labels, with provenance
    page.select_option("#sn-format", "math_shepherd")
    page.check("#sn-provenance")
    link = row.locator(".sn-download-link[data-split=all]")
    href = link.get_attribute("href") or ""
    assert "format=math_shepherd" in href and "provenance=true" in href
    got = page.request.get(live_server.url + href)
    assert got.status == 200
    records = [json.loads(line) for line in got.text().splitlines()]
    assert [record["label"][-1] for record in records] == ["-", "-"]
    assert [step["source"] for step in records[1]["provenance"]] == ["machine:monte_carlo"] * 3

    # OpenRLHF offers soft labels from the Monte-Carlo values
    assert page.locator("#sn-soft-labels-label").is_hidden()
    page.select_option("#sn-format", "openrlhf")
    page.select_option("#sn-soft-labels", "monte_carlo")
    href = link.get_attribute("href") or ""
    assert "soft_labels=monte_carlo" in href
    got = page.request.get(live_server.url + href)
    assert got.status == 200
    assert json.loads(got.text().splitlines()[0])["value"] == [0.875, 0.0, 0.0]
    assert page_overflow(page) == []
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "machine-snapshots-1366.png"), full_page=True)
