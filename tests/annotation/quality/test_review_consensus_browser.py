"""The review page shows majority vote and Dawid-Skene side by side (Debian's chromium,
Playwright, under the site's Content-Security-Policy): per step majority's label (a tie
as a tie) and Dawid-Skene's with its posterior; the project's method is marked "used" and
is what "take consensus" takes. Screenshots at 1366x768 and 390 px."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page

from annotation.models import Annotation, AnnotationSource, ConsensusMethod, Role
from annotation.quality.consensus_fit import dawid_skene_fit
from tests.annotation.quality.test_consensus_dawid_skene import calibrated_project
from tests.browser import ARTIFACTS, page_login, page_watched
from tests.factories import MembershipFactory, ProjectFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _open(page: Page, base_url: str, project: Any, chain: Any) -> None:
    page.goto(f"{base_url}/projects/{project.pk}/review/#chain={chain.pk}")
    page.wait_for_selector("#review[data-state=ready]")
    page.wait_for_selector(f"#review[data-chain='{chain.pk}']")


def _cells(page: Page, css: str) -> list[str]:
    return page.locator(f"#rv-grid tbody td.{css}").all_inner_texts()


@pytest.mark.parametrize(("width", "height"), [(1366, 768), (390, 844)])
def test_review_shows_majority_and_dawid_skene_side_by_side(
    live_server: Any, browser: Any, width: int, height: int
) -> None:
    # Given: ann, bob and cat agree on a 30-step chain where uli and vic often err; on the
    # target chain ann says +1 twice, uli -1 twice, vic -1 on step 2
    project = ProjectFactory(overlap=3, name="Consensus side by side")
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    people, _, target = calibrated_project(project)
    # ...and a Dawid-Skene fit of these labels is stored (a majority-vote project shows
    # one beside majority vote while it is current, and never fits for it)
    dawid_skene_fit(project=project)

    with page_watched(browser=browser, width=width, height=height, csp_errors=True) as page:
        page_login(page=page, base_url=live_server.url, username=lead.username)

        # When: the lead opens the target chain on the review page
        _open(page, live_server.url, project, target)

        # Then: majority ties on step 1 (shown as a tie) and outvotes ann on step 2;
        # Dawid-Skene follows ann on both, with its posterior probability
        assert _cells(page, "rv-majority") == ["tie (+1 / −1)", "−1 (67 %)"]
        assert page.locator("#rv-grid td.rv-majority.rv-tie").count() == 1
        assert _cells(page, "rv-ds") == ["+1 (p 1.00)", "+1 (p 1.00)"]
        assert page.locator("#rv-grid td.rv-ds.rv-tie").count() == 0
        # ...majority is the project's method, marked so; each voter's reliability shows
        used = page.locator("#rv-grid thead th.rv-method.is-used")
        assert used.get_attribute("data-method") == "majority"
        # (under each voter's name, compact: "100 %"; what it means in its title)
        names = {key: people[key].username for key in ("ann", "uli")}
        reliability = {
            key: page.locator(f"#rv-grid thead th[title^='{name}:'] .rv-reliability")
            for key, name in names.items()
        }
        assert reliability["ann"].inner_text() == "100 %"
        title = reliability["ann"].get_attribute("title") or ""
        assert f"how often {names['ann']} gives the true label" in title
        assert int(reliability["uli"].inner_text().split(" ")[0]) < 50
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(
            path=str(ARTIFACTS / f"review-consensus-majority-{width}.png"), full_page=True
        )

        # When: the project switches to Dawid-Skene and the lead takes the consensus
        project.consensus = ConsensusMethod.DAWID_SKENE
        project.save(update_fields=["consensus"])
        page.reload()
        page.wait_for_selector(f"#review[data-state=ready][data-chain='{target.pk}']")
        assert used.get_attribute("data-method") == "dawid_skene"
        # (on a phone the grid scrolls inside its card: show the methods' columns)
        page.locator("#rv-grid td.rv-ds").first.scroll_into_view_if_needed()
        page.screenshot(
            path=str(ARTIFACTS / f"review-consensus-dawid-skene-{width}.png"), full_page=True
        )
        page.keyboard.press("a")
        page.keyboard.press("Enter")
        page.wait_for_selector("#rv-message.ok")

    # Then: the ruling took Dawid-Skene's labels, ann's +1 on both steps
    ruling = Annotation.objects.get(chain=target, source=AnnotationSource.ADJUDICATION)
    assert list(ruling.ratings.order_by("step__index").values_list("rating", flat=True)) == [1, 1]
