"""The data manager puts chains into an evaluation set and takes them out, in a real
browser (Debian's chromium driven by Playwright against pytest-django's live server,
under the site's Content-Security-Policy) with a real Celery worker: the set is chosen
from the project's, the count names what is left and why, with a screenshot. Its list
names each chain's set, and filters on being in one."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from annotation.datasets.evaluation_sets import evaluation_set_mark_chains
from annotation.models import Chain, Role
from annotation.quality.gold import gold_mark
from tests.annotation.import_worker import import_worker  # noqa: F401 - a fixture
from tests.browser import (
    ARTIFACTS,
    page_clipped_sideways,
    page_login,
    page_overflow,
    page_watched,
)
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory, annotation_with_ratings

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_lead_puts_ticked_chains_into_a_set_and_takes_every_one_out(
    browser: Browser,
    live_server: Any,
    import_worker: Any,  # noqa: F811 - the fixture imported above
) -> None:
    # Given: six labeled chains, the first gold, and two evaluation sets (one chain each)
    project = ProjectFactory(name="Competition chains")
    lead = MembershipFactory(project=project, role=Role.LEAD, user__username="lena").user
    chains = [ChainFactory(project=project, step_count=3) for _ in range(6)]
    for chain in chains:
        annotation_with_ratings(chain=chain, labels=[1, 1, -1])
    ids = [chain.pk for chain in chains]
    gold_mark(project=project, chain_ids=ids[:1])
    evaluation_set_mark_chains(project=project, chain_ids=ids[5:], name="early")
    unseen = evaluation_set_mark_chains(project=project, chain_ids=ids[4:5], name="unseen")

    with page_watched(browser=browser, width=1366, height=844, csp_errors=True) as page:
        page_login(page=page, base_url=live_server.url, username=lead.username)
        page.goto(f"{live_server.url}/projects/{project.pk}/chains/")
        page.wait_for_selector("#chains[data-state=ready]")

        # When: the lead ticks the gold chain and two others, and asks to put them into
        # the set "unseen"
        for chain_id in ids[:3]:
            page.locator(f"#ch-rows tr[data-chain='{chain_id}'] td.ch-tick input").check()
        expect(page.locator("#ch-bulk-set-label")).to_be_hidden()
        page.locator("#ch-bulk-action").select_option("evaluation_add")
        expect(page.locator("#ch-bulk-set-label")).to_be_visible()
        page.locator("#ch-bulk-set").select_option(label="unseen")
        page.locator("#ch-bulk-preview").click()

        # Then: the count comes first, naming the gold chain it leaves; nothing moved yet
        expect(page.locator("#ch-bulk-count")).to_contain_text(
            "Put into an evaluation set: changes 2 of 3 chains"
        )
        expect(page.locator("#ch-bulk-reasons")).to_contain_text("1 left as they are: gold")
        assert list(unseen.chains.values_list("pk", flat=True)) == ids[4:5]
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "chains-bulk-evaluation.png"), full_page=True)
        assert page_overflow(page, 1366) == []

        # When: they confirm; Then: the worker does it and the page says so
        page.locator("#ch-bulk-go").click()
        expect(page.locator("#ch-message")).to_have_text("Done: 2 chains changed.", timeout=60_000)
        assert sorted(unseen.chains.values_list("pk", flat=True)) == [ids[1], ids[2], ids[4]]

        # When: they take every chain the (empty) filters match out of "unseen"
        page.locator("#ch-bulk-scope").select_option("filter")
        page.locator("#ch-bulk-action").select_option("evaluation_remove")
        page.locator("#ch-bulk-set").select_option(label="unseen")
        page.locator("#ch-bulk-preview").click()
        expect(page.locator("#ch-bulk-count")).to_contain_text("changes 3 of 6 chains")
        expect(page.locator("#ch-bulk-reasons")).to_contain_text(
            "3 left as they are: not in this evaluation set"
        )
        page.locator("#ch-bulk-go").click()

        # Then: its chains are ordinary work again; the other set keeps its chain
        expect(page.locator("#ch-message")).to_have_text("Done: 3 chains changed.", timeout=60_000)
        assert not unseen.chains.exists()
        held = Chain.objects.filter(evaluation_set__isnull=False).values_list("pk", flat=True)
        assert list(held) == ids[5:]
        page.screenshot(path=str(ARTIFACTS / "chains-bulk-evaluation-done.png"), full_page=True)


def test_the_list_names_each_chain_s_set_and_filters_on_it(
    browser: Browser, live_server: Any
) -> None:
    # Given: five chains, two held out in "unseen", one in a set with a long file name
    project = ProjectFactory(name="Held-out chains")
    lead = MembershipFactory(project=project, role=Role.LEAD, user__username="lena").user
    ids = [ChainFactory(project=project, step_count=2).pk for _ in range(5)]
    evaluation_set_mark_chains(project=project, chain_ids=[ids[1], ids[3]], name="unseen")
    long_name = "processbench-olympiadbench-competition-level-held-out-2026-11.jsonl"
    evaluation_set_mark_chains(project=project, chain_ids=[ids[4]], name=long_name)

    with page_watched(browser=browser, width=1366, height=844, csp_errors=True) as page:
        page_login(page=page, base_url=live_server.url, username=lead.username)
        page.goto(f"{live_server.url}/projects/{project.pk}/chains/")
        page.wait_for_selector("#chains[data-state=ready]")

        # Then: each row names the set its chain is held out in, or none
        def shown() -> dict[int, str]:
            rows = page.locator("#ch-rows tr[data-chain]")
            return {
                int(row.get_attribute("data-chain") or 0): row.locator("td.ch-set").inner_text()
                for row in rows.all()
            }

        expect(page.locator("#ch-rows tr[data-chain]")).to_have_count(5)
        assert shown() == {
            ids[0]: "—",
            ids[1]: "unseen",
            ids[2]: "—",
            ids[3]: "unseen",
            ids[4]: long_name,
        }
        # A long name is cut with an ellipsis, read whole on hover: the table still fits
        cut = page.locator(f"#ch-rows tr[data-chain='{ids[4]}'] td.ch-set span")
        assert cut.get_attribute("title") == long_name
        assert page_overflow(page, 1366) == []
        assert page_clipped_sideways(page) == []

        # When: the lead keeps the chains in a set; Then: only those are listed
        page.locator("#ch-evaluation").select_option("true")
        expect(page.locator("#ch-rows tr[data-chain]")).to_have_count(3)
        assert sorted(shown()) == [ids[1], ids[3], ids[4]]
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "chains-evaluation-filter.png"), full_page=True)

        # When: the lead keeps the chains in none; Then: the others are
        page.locator("#ch-evaluation").select_option("false")
        expect(page.locator("#ch-rows tr[data-chain]")).to_have_count(2)
        assert sorted(shown()) == [ids[0], ids[2]]
