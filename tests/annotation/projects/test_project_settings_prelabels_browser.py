"""The lead turns verification on from the settings page (issue 23; Debian's chromium
under the site's Content-Security-Policy, at 1366x768 and 390x844): off by default, the
judge as source and a tenth held out; a holdout past 1 is refused beside its field and
nothing saved; then pre-labels on from Monte-Carlo with a quarter held out. Screenshots go
to tests/artifacts/."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from annotation.models import MachineSource, Role
from tests.browser import ARTIFACTS, page_overflow, page_signed_in, page_watched
from tests.factories import MembershipFactory, ProjectFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(("width", "height"), [(1366, 768), (390, 844)])
def test_the_lead_turns_pre_labels_on(
    live_server: Any, browser: Browser, width: int, height: int
) -> None:
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    with page_watched(browser=browser, width=width, height=height, csp_errors=True) as page:
        page_signed_in(page=page, base_url=live_server.url, user=lead)
        page.goto(f"{live_server.url}/projects/{project.pk}/settings/")
        page.wait_for_selector("#project-settings[data-state=ready]")

        # Then: off, the judge, 0.1 held out
        expect(page.locator("#f-prelabels")).not_to_be_checked()
        expect(page.locator("#f-prelabel_source")).to_have_value("judge")
        expect(page.locator("#f-prelabel_holdout")).to_have_value("0.1")

        # When: on, with a holdout past 1
        page.check("#f-prelabels")
        page.select_option("#f-prelabel_source", "monte_carlo")
        page.fill("#f-prelabel_holdout", "1.5")
        page.get_by_role("button", name="Save settings").click()

        # Then: refused beside the field, nothing saved
        expect(page.locator("#e-prelabel_holdout")).to_have_text(
            "Ensure this value is less than or equal to 1.0."
        )
        expect(page.locator("#form-message")).to_contain_text("Nothing was saved")
        project.refresh_from_db()
        assert (project.prelabels, project.prelabel_holdout) == (False, pytest.approx(0.1))

        # When: a quarter
        page.fill("#f-prelabel_holdout", "0.25")
        page.get_by_role("button", name="Save settings").click()

        # Then: saved
        expect(page.locator("#form-message")).to_contain_text("Saved")
        project.refresh_from_db()
        assert project.prelabels is True
        assert project.prelabel_source == MachineSource.MONTE_CARLO
        assert project.prelabel_holdout == pytest.approx(0.25)
        section = page.locator("section", has=page.locator("#f-prelabels"))
        section.scroll_into_view_if_needed()
        ARTIFACTS.mkdir(exist_ok=True)
        section.screenshot(path=str(ARTIFACTS / f"settings-prelabels-{width}.png"))
        assert page_overflow(page, width) == []


def test_a_source_without_labels_is_saved_with_a_warning_beside_it(
    live_server: Any, browser: Browser
) -> None:
    # Given a project with no machine label at all
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    with page_watched(browser=browser, width=1366, height=768, csp_errors=True) as page:
        page_signed_in(page=page, base_url=live_server.url, user=lead)
        page.goto(f"{live_server.url}/projects/{project.pk}/settings/")
        page.wait_for_selector("#project-settings[data-state=ready]")
        expect(page.locator("#w-prelabel_source")).to_be_hidden()

        # When the lead turns pre-labels on from the PRM and routes by the PRM
        page.check("#f-prelabels")
        page.select_option("#f-prelabel_source", "prm")
        page.check("#f-routing_sources input[value=prm]")
        page.get_by_role("button", name="Save settings").click()

        # Then it is saved, and the page says why the PRM shows nothing yet and what to do
        expect(page.locator("#form-message")).to_contain_text("Saved")
        expect(page.locator("#form-message")).to_contain_text("No PRM machine labels yet")
        for field in ("prelabel_source", "routing_sources"):
            expect(page.locator(f"#w-{field}")).to_have_text(
                "No PRM machine labels yet: activate a model version and run scoring (the "
                "Models page, or score_chains), which writes its verdicts on the chains it "
                "scores."
            )
        project.refresh_from_db()
        assert (project.prelabels, project.prelabel_source) == (True, MachineSource.PRM)
        assert project.routing_sources == [MachineSource.PRM]

        # And a reload shows the same warning beside the field
        page.reload()
        page.wait_for_selector("#project-settings[data-state=ready]")
        expect(page.locator("#w-prelabel_source")).to_contain_text("No PRM machine labels yet")
