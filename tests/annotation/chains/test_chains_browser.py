"""The data manager in a real browser (Debian's chromium driven by Playwright against
pytest-django's live server, under the site's Content-Security-Policy): a lead filters the
chain list by status and by annotator, searches a word, pages on, opens a chain, reads its
revisions, ratings and flag, unflags it, marks it gold and requeues another; at 1366x768
and on a 390 px phone, with screenshots."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from annotation.models import Chain, Role, Step
from annotation.quality.consensus_fit import dawid_skene_fit
from tests.annotation.import_worker import import_worker  # noqa: F401 - a fixture
from tests.browser import ARTIFACTS, AnswerHeld, page_login, page_overflow, page_watched
from tests.factories import (
    ChainFactory,
    MembershipFactory,
    ProblemFactory,
    ProjectFactory,
    annotation_with_ratings,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

XSS_IMG = '<img src=x onerror="window.__xss=1">'
TILINGS = 55  # chains whose last step says "tilings": more than one page of 50


@pytest.fixture
def lab() -> dict[str, Any]:
    """Overlap 2, two annotators. ``TILINGS`` unlabeled chains that count tilings; one
    chain both annotators finished and agree on (``agreed``); one they dispute, that bob
    flagged and that carries imported labels (``disputed``: it can be gold); one only
    ann labeled (``half``)."""
    project = ProjectFactory(overlap=2, name="Domino tilings, round 2")
    lead = MembershipFactory(project=project, role=Role.LEAD, user__username="lena").user
    ann = MembershipFactory(project=project, user__username="ann").user
    bob = MembershipFactory(project=project, user__username="bob").user
    for n in range(TILINGS):
        chain = ChainFactory(project=project, step_count=3)
        Step.objects.filter(chain=chain, index=2).update(text=f"So there are {n} tilings.")
    problem = ProblemFactory(
        project=project, text=f"Count the domino tilings of a $2 \\times 3$ board. {XSS_IMG}"
    )
    agreed = ChainFactory(
        project=project, problem=problem, step_count=3, finished_count=2, is_finished=True
    )
    annotation_with_ratings(chain=agreed, annotator=ann, labels=[1, 1, 1])
    annotation_with_ratings(chain=agreed, annotator=bob, labels=[1, 1, 1])
    disputed = ChainFactory(
        project=project,
        problem=problem,
        step_count=3,
        finished_count=2,
        is_finished=True,
        is_flagged=True,
        flag_reason="step 2 is cut in half",
        flagged_by=bob,
        flagged_at=timezone.now() - timedelta(hours=1),
    )
    annotation_with_ratings(chain=disputed, annotator=ann, labels=[1, 1, -1])
    annotation_with_ratings(chain=disputed, annotator=bob, labels=[1, -1, -1])
    annotation_with_ratings(chain=disputed, labels=[1, -1, -1])  # imported labels
    half = ChainFactory(project=project, step_count=3, finished_count=1)
    annotation_with_ratings(chain=half, annotator=ann, labels=[1, 0, None])
    return {
        "project": project,
        "lead": lead,
        "ann": ann,
        "bob": bob,
        "agreed": agreed,
        "disputed": disputed,
        "half": half,
    }


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=1366, height=768, csp_errors=True) as opened:
        yield opened


def _open_list(page: Page, live_server: Any, lab: dict[str, Any]) -> None:
    page_login(page=page, base_url=live_server.url, username=lab["lead"].username)
    page.goto(f"{live_server.url}/projects/{lab['project'].pk}/chains/")
    page.wait_for_selector("#chains[data-state=ready]")


def _shown(page: Page) -> list[int]:
    page.wait_for_selector("#chains[data-state=ready]")
    return [int(row.get_attribute("data-chain") or 0) for row in page.locator("#ch-rows tr").all()]


def test_lead_filters_searches_pages_and_opens_a_chain(
    live_server: Any, page: Page, lab: dict[str, Any]
) -> None:
    # Given: a Dawid-Skene fit of the labels is stored (a majority-vote project shows a
    # current one beside majority vote and never fits for itself), and the lead opens
    # the data manager from the dashboard
    dawid_skene_fit(project=lab["project"])
    page_login(page=page, base_url=live_server.url, username=lab["lead"].username)
    page.goto(f"{live_server.url}/projects/{lab['project'].pk}/")
    page.get_by_role("link", name="Chains", exact=True).click()
    page.wait_for_selector("#chains[data-state=ready]")

    # Then: the first page holds 50 chains, by id, and offers the next one
    first = _shown(page)
    assert len(first) == 50 and first == sorted(first)
    expect(page.locator("#ch-next")).to_be_visible()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "chains.png"), full_page=True)

    # When: only flagged chains
    page.locator("#ch-status").select_option("flagged")
    # Then: the disputed chain alone, flagged, its problem shown as text
    expect(page.locator("#ch-rows tr")).to_have_count(1)
    assert _shown(page) == [lab["disputed"].pk]
    expect(page.locator("#ch-rows tr").first).to_contain_text("flagged")
    assert page.locator("#ch-rows img").count() == 0
    assert page.evaluate("() => typeof window.__xss") == "undefined"
    expect(page.locator("#ch-next")).to_be_hidden()

    # When: finished chains ann labeled, then the same for chains ann labeled in any state
    page.locator("#ch-status").select_option("finished")
    page.locator("#ch-annotator").select_option(label="ann")
    expect(page.locator("#ch-rows tr")).to_have_count(2)
    assert _shown(page) == [lab["agreed"].pk, lab["disputed"].pk]
    page.locator("#ch-status").select_option("")
    expect(page.locator("#ch-rows tr")).to_have_count(3)
    assert _shown(page) == [lab["agreed"].pk, lab["disputed"].pk, lab["half"].pk]
    expect(page.locator(f"#ch-rows tr[data-chain='{lab['half'].pk}']")).to_contain_text("1 / 2")

    # When: anyone's chains, searched for a word the 55 counting chains have
    page.locator("#ch-annotator").select_option("")
    page.locator("#ch-q").fill("tilings")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_selector("#ch-rows tr >> nth=49")
    searched = _shown(page)
    # (the two finished chains' problem says "tilings" as well)
    assert len(searched) == 50
    # When: the next page
    page.get_by_role("button", name="Next page").click()
    expect(page.locator("#ch-first")).to_be_visible()
    rest = _shown(page)
    # Then: the rest, after the first page, none twice, and no page after it
    assert len(rest) == TILINGS + 2 - 50 and min(rest) > max(searched)
    expect(page.locator("#ch-next")).to_be_hidden()
    assert set(searched + rest) == set(
        Chain.objects.filter(project=lab["project"])
        .exclude(pk=lab["half"].pk)
        .values_list("pk", flat=True)
    )

    # When: the lead opens the disputed chain from the list
    page.locator(f"#ch-rows tr[data-chain='{lab['disputed'].pk}'] a").click()
    page.wait_for_selector("#chain[data-state=ready]")

    # Then: its status, every revision with who and when, ratings per step, and the flag
    expect(page.locator("#cp-status")).to_have_text("flagged")
    history = page.locator("#cp-history li")
    expect(history).to_have_count(3)
    year = str(timezone.localdate().year)
    for n, who in enumerate(["ann (human)", "bob (human)", "import:prm800k (import)"]):
        expect(history.nth(n)).to_contain_text(who)
        expect(history.nth(n)).to_contain_text(year)
    heads = page.locator("#cp-steps thead th").all_inner_texts()
    assert heads[2:5] == ["ann", "bob", "import:prm800k"]
    second = page.locator("#cp-steps tbody tr").nth(1).locator("td").all_inner_texts()
    assert second[2:5] == ["+1", "−1", "−1"]
    # ...and both consensus methods side by side, the project's own marked as used
    assert heads[5:8] == ["Consensus", "Majority (used)", "Dawid–Skene"]
    # (ann's +1 against bob's -1: a tie for majority, never taken as a label; Dawid-Skene
    # weighs the two by what it learned of them)
    assert second[5:7] == ["−1 (tie)", "tie"]
    assert re.fullmatch(r"[+−]1 \(p [01]\.\d\d\)", second[7]), second[7]
    expect(page.locator("#cp-flag")).to_contain_text("Flagged by bob")
    expect(page.locator("#cp-flag")).to_contain_text("step 2 is cut in half")
    assert page.locator("#cp-problem img").count() == 0
    page.screenshot(path=str(ARTIFACTS / "chain.png"), full_page=True)

    # When: the lead unflags it
    page.get_by_role("button", name="Unflag").click()
    # Then: the page says so, the flag's history stays, and the chain is unflagged
    expect(page.locator("#cp-message")).to_contain_text("Unflagged")
    expect(page.locator("#cp-unflag")).to_be_hidden()
    expect(page.locator("#cp-flag")).to_contain_text("Flag cleared by lena")
    expect(page.locator("#cp-flag")).to_contain_text("step 2 is cut in half")
    assert not Chain.objects.get(pk=lab["disputed"].pk).is_flagged

    # When: it is marked gold (its imported labels are the answer key)
    page.get_by_role("button", name="Mark gold").click()
    # Then: gold, nothing left to requeue or mark
    expect(page.locator("#cp-message")).to_contain_text("Marked gold")
    expect(page.locator("#cp-status")).to_have_text("gold")
    expect(page.locator("#cp-gold")).to_be_hidden()
    expect(page.locator("#cp-requeue")).to_be_hidden()
    assert Chain.objects.get(pk=lab["disputed"].pk).is_gold

    # When: the lead goes back to the list, opens the agreed chain and requeues it
    page.get_by_role("link", name="All chains").click()
    page.wait_for_selector("#chains[data-state=ready]")
    page.locator("#ch-status").select_option("finished")
    expect(page.locator("#ch-rows tr")).to_have_count(2)  # statuses overlap: gold, finished
    page.locator(f"#ch-rows tr[data-chain='{lab['agreed'].pk}'] a").click()
    page.wait_for_selector("#chain[data-state=ready]")
    expect(page.locator("#cp-counts")).to_contain_text("2 of 2 human passes")
    page.get_by_role("button", name="Requeue for one more label").click()
    # Then: the page answers that it asks for one more, and shows it in progress again
    expect(page.locator("#cp-message")).to_contain_text("Requeued")
    expect(page.locator("#cp-counts")).to_contain_text("2 of 3 human passes")
    expect(page.locator("#cp-status")).to_have_text("in progress")


def test_a_late_answer_to_an_older_filter_does_not_replace_the_newer_list(
    live_server: Any, page: Page, lab: dict[str, Any]
) -> None:
    # Given: the answer for ann's finished chains is held back on its way to the page
    _open_list(page, live_server, lab)
    older = AnswerHeld(
        page, r".*/chains/\?.*", lambda url: "status=finished" in url and "annotator=" in url
    )
    page.locator("#ch-status").select_option("finished")
    page.locator("#ch-annotator").select_option(label="ann")
    older.wait()

    # When: the lead widens the filter to ann's chains in any state before it answers
    page.locator("#ch-status").select_option("")
    expect(page.locator("#ch-rows tr")).to_have_count(3)
    newer = _shown(page)
    # ...and the older answer (two chains) arrives after the newer one
    older.release()

    # Then: the list still shows what the filters now ask for
    assert newer == [lab["agreed"].pk, lab["disputed"].pk, lab["half"].pk]
    assert _shown(page) == newer
    expect(page.locator("#ch-status")).to_have_value("")


def test_a_chain_without_an_answer_key_is_not_offered_as_gold(
    live_server: Any, page: Page, lab: dict[str, Any]
) -> None:
    _open_list(page, live_server, lab)
    page.goto(f"{live_server.url}/projects/{lab['project'].pk}/chains/{lab['agreed'].pk}/")
    page.wait_for_selector("#chain[data-state=ready]")

    expect(page.locator("#cp-gold")).to_be_hidden()
    expect(page.locator("#cp-gold-note")).to_contain_text("adjudication or imported labels")
    expect(page.locator("#cp-requeue")).to_be_visible()


@pytest.mark.parametrize("width", [390])
def test_the_data_manager_fits_a_phone(
    browser: Browser, live_server: Any, lab: dict[str, Any], width: int
) -> None:
    with page_watched(browser=browser, width=width, height=844, csp_errors=True) as phone:
        _open_list(phone, live_server, lab)
        expect(phone.locator("#ch-rows tr")).to_have_count(50)
        ARTIFACTS.mkdir(exist_ok=True)
        phone.screenshot(path=str(ARTIFACTS / f"chains-{width}.png"), full_page=True)
        assert page_overflow(phone, width) == []

        phone.goto(f"{live_server.url}/projects/{lab['project'].pk}/chains/{lab['disputed'].pk}/")
        phone.wait_for_selector("#chain[data-state=ready]")
        phone.screenshot(path=str(ARTIFACTS / f"chain-{width}.png"), full_page=True)
        assert page_overflow(phone, width) == []


@pytest.mark.parametrize("width", [1366, 390])
def test_lead_sorts_ticks_and_requeues_then_unflags_a_whole_filter(
    browser: Browser,
    live_server: Any,
    lab: dict[str, Any],
    import_worker: Any,  # noqa: F811 - the fixture imported above
    width: int,
) -> None:
    # Given: the lead's data manager
    with page_watched(browser=browser, width=width, height=844, csp_errors=True) as page:
        _open_list(page, live_server, lab)
        finished = {lab["agreed"].pk, lab["disputed"].pk}

        # When: they sort by passes, most first: a second click on the header, or on a
        # phone (whose rows stack, without the header row) the "Sort by" list
        passes = page.locator("#chains th[data-sort=passes]")
        if width < 600:
            page.locator("#ch-sort").select_option("-passes")
        else:
            passes.get_by_role("button").click()
            page.wait_for_selector("#chains[data-state=ready]")
            passes.get_by_role("button").click()
        shown = _shown(page)
        # Then: the two finished chains lead, then the half-labeled one; the list says so
        assert set(shown[:2]) == finished and shown[2] == lab["half"].pk
        expect(passes).to_have_attribute("aria-sort", "descending")
        expect(page.locator("#ch-sort")).to_have_value("-passes")

        # When: they tick those two and ask to requeue them for one more pass each
        for chain_id in shown[:2]:
            page.locator(f"#ch-rows tr[data-chain='{chain_id}'] td.ch-tick input").check()
        expect(page.locator("#ch-selected")).to_have_text("2 chains ticked")
        page.locator("#ch-bulk-action").select_option("requeue")
        page.locator("#ch-bulk-preview").click()
        # Then: the count comes first, and nothing has changed yet
        expect(page.locator("#ch-bulk-count")).to_contain_text("changes 2 of 2 chains")
        assert set(Chain.objects.filter(extra_labels__gt=0).values_list("pk", flat=True)) == set()
        page.screenshot(path=str(ARTIFACTS / f"chains-bulk-confirm-{width}.png"), full_page=True)
        assert page_overflow(page, width) == []

        # When: they confirm; Then: the worker does it, the page says so, ticks clear
        page.locator("#ch-bulk-go").click()
        expect(page.locator("#ch-message")).to_have_text("Done: 2 chains changed.", timeout=60_000)
        expect(page.locator("#ch-selected")).to_have_text("No chain ticked")
        assert set(Chain.objects.filter(extra_labels=1).values_list("pk", flat=True)) == finished

        # When: they filter the flagged chains and clear every flag the filter matches
        page.locator("#ch-status").select_option("flagged")
        page.wait_for_selector("#chains[data-state=ready]")
        assert _shown(page) == [lab["disputed"].pk]
        page.locator("#ch-bulk-scope").select_option("filter")
        page.locator("#ch-bulk-action").select_option("unflag")
        page.locator("#ch-bulk-preview").click()
        expect(page.locator("#ch-bulk-count")).to_contain_text("changes 1 of 1 chain")
        page.locator("#ch-bulk-go").click()
        # Then: the flag is gone and the filtered list is empty
        expect(page.locator("#ch-message")).to_have_text("Done: 1 chain changed.", timeout=60_000)
        expect(page.locator("#ch-empty")).to_be_visible()
        assert not Chain.objects.filter(pk=lab["disputed"].pk, is_flagged=True).exists()
        page.screenshot(path=str(ARTIFACTS / f"chains-bulk-done-{width}.png"), full_page=True)
        assert page_overflow(page, width) == []
