"""The lead's dashboard shows each machine source against people and gold (issue 23),
at 1366x768 and on a 390 px phone (Debian's chromium, under the site's
Content-Security-Policy). Screenshots go to tests/artifacts/."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from annotation.models import Role
from tests.browser import ARTIFACTS, page_overflow, page_signed_in, page_watched
from tests.factories import (
    ChainFactory,
    MembershipFactory,
    ProjectFactory,
    UserFactory,
    annotation_with_ratings,
    machine_labels,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(("width", "height"), [(1366, 768), (390, 844)])
def test_the_lead_reads_each_machine_source_against_people(
    live_server: Any, browser: Browser, width: int, height: int
) -> None:
    # Given: three chains two people agree on, a judge that misses the last one's error
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    people = [[1, 1, 1], [1, -1, None], [1, 1, -1]]
    judge = [[1, 1, 1], [1, -1, None], [1, 1, 1]]
    for human, machine in zip(people, judge, strict=True):
        chain = ChainFactory(project=project, step_count=3)
        for voter in (UserFactory(), UserFactory()):
            annotation_with_ratings(chain=chain, labels=human, annotator=voter)
        machine_labels(chain=chain, ratings=machine, source="judge", run_kind="judge")

    with page_watched(browser=browser, width=width, height=height, csp_errors=True) as page:
        page_signed_in(page=page, base_url=live_server.url, user=lead)
        page.goto(f"{live_server.url}/projects/{project.pk}/")
        page.wait_for_selector("#dashboard[data-state=ready]")

        # Then: the judge's row against people, and one against gold (none yet)
        card = page.locator("#db-machines")
        expect(card).to_be_visible()
        rows = card.locator("tbody tr")
        expect(rows).to_have_count(2)
        people_row = [c.strip() for c in rows.nth(0).locator("td").all_inner_texts()]
        assert people_row[:4] == ["Judge (3 chains)", "People", "3", "8"]
        assert people_row[5].startswith("67 % [") and people_row[5].endswith("of 3")
        assert people_row[6] == "1 0 1 | 0 0 0 | 0 0 6"
        gold_row = [c.strip() for c in rows.nth(1).locator("td").all_inner_texts()]
        assert gold_row[1:4] == ["Gold", "0", "0"]
        card.scroll_into_view_if_needed()
        ARTIFACTS.mkdir(exist_ok=True)
        card.screenshot(path=str(ARTIFACTS / f"dashboard-machines-card-{width}.png"))
        assert page_overflow(page, width) == []
