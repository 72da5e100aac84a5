"""The lead's dashboard shows what machine pre-labels do (issue 23): acceptance, seconds
per chain and gold accuracy with the verdicts shown and held out, each with its
interval, at 1366x768 and on a 390 px phone (Debian's chromium, under the site's
Content-Security-Policy). Screenshots go to tests/artifacts/."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from tests.annotation.quality.prelabel_lab import verified_project
from tests.browser import ARTIFACTS, page_overflow, page_signed_in, page_watched
from tests.factories import ProjectFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(("width", "height"), [(1366, 768), (390, 844)])
def test_the_lead_reads_the_pre_label_figures(
    live_server: Any, browser: Browser, width: int, height: int
) -> None:
    lab = verified_project(ProjectFactory())
    with page_watched(browser=browser, width=width, height=height, csp_errors=True) as page:
        page_signed_in(page=page, base_url=live_server.url, user=lab["lead"])
        page.goto(f"{live_server.url}/projects/{lab['project'].pk}/")
        page.wait_for_selector("#dashboard[data-state=ready]")

        card = page.locator("#db-prelabels")
        expect(card).to_be_visible()
        rows = card.locator("tbody tr")
        expect(rows).to_have_count(4)
        expect(card.locator("#db-prelabels-about")).to_contain_text("Source now: Judge; 100 %")
        cells = [[c.strip() for c in row.locator("td").all_inner_texts()] for row in rows.all()]
        assert cells[0] == ["Chains", "3", "2"]
        assert cells[1][0] == "Agree with the machine"
        assert cells[1][1].startswith("89 % [") and cells[1][1].endswith("of 9 steps")
        assert cells[1][2].startswith("83 % [") and cells[1][2].endswith("of 6 steps")
        assert cells[2][1].startswith("20.0 s [0.0, ") and cells[2][1].endswith("over 3 chains")
        assert cells[3][1].startswith("67 % [") and cells[3][2] == "—"
        card.scroll_into_view_if_needed()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / f"dashboard-prelabels-{width}.png"), full_page=True)
        card.screenshot(path=str(ARTIFACTS / f"dashboard-prelabels-card-{width}.png"))
        assert page_overflow(page, width) == []
