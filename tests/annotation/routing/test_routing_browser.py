"""The lead sets routing's rules on the settings page and routes from the dashboard (issue
23, item 7; Debian's chromium under the site's Content-Security-Policy, at 1366x768 and
390x844, a real Celery worker running the passes): the card is hidden while no source
is chosen; the lead checks both sources, opts in and saves; on the dashboard "Route now"
queues a pass and the card shows the chains per rule and each source's kappa. Nothing
scrolls sideways. Screenshots go to tests/artifacts/."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from annotation.models import MachineSource, Role
from annotation.routing.services import chains_route
from tests.annotation.import_worker import import_worker  # noqa: F401 - a fixture
from tests.annotation.routing.routing_lab import routing_chains, with_rules
from tests.browser import ARTIFACTS, AnswerHeld, page_overflow, page_signed_in, page_watched
from tests.factories import MembershipFactory, ProjectFactory
from tests.prm_training.prm_worker import WorkerHandle, worker_broker_flush

pytestmark = [pytest.mark.slow, pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def _settings(page: Page, base: str, project: Any, width: int) -> None:
    page.goto(f"{base}/projects/{project.pk}/settings/")
    page.wait_for_selector("#project-settings[data-state=ready]")
    section = page.locator("#routing-settings")
    expect(page.locator("#f-routing_spot_check")).to_have_value("0.05")
    expect(page.locator("#f-routing_min_kappa")).to_have_value("0.6")

    # A share past 1 is refused beside its field
    section.get_by_label("Monte-Carlo rollouts").check()
    section.get_by_label("Judge").check()
    page.check("#f-routing_accept")
    page.fill("#f-routing_spot_check", "2")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#e-routing_spot_check")).to_contain_text("less than or equal to 1")
    project.refresh_from_db()
    assert project.routing_sources == []

    page.fill("#f-routing_spot_check", "0")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#form-message")).to_contain_text("Saved")
    expect(page.locator("#form-message")).to_contain_text("Routing sources")
    project.refresh_from_db()
    assert project.routing_sources == [MachineSource.MONTE_CARLO, MachineSource.JUDGE]
    assert (project.routing_accept, project.routing_spot_check) == (True, 0.0)
    # Saved again untouched: the list compares as saved, nothing is sent
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#form-message")).to_have_text("Nothing changed.")
    section.scroll_into_view_if_needed()
    section.screenshot(path=str(ARTIFACTS / f"settings-routing-{width}.png"))
    assert page_overflow(page, width) == []


@pytest.mark.parametrize(("width", "height"), [(1366, 768), (390, 844)])
def test_the_lead_sets_routing_and_routes_from_the_dashboard(
    import_worker: WorkerHandle,  # noqa: F811 - the fixture
    live_server: Any,
    browser: Browser,
    width: int,
    height: int,
) -> None:
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    chains = routing_chains(project)
    ARTIFACTS.mkdir(exist_ok=True)
    with page_watched(browser=browser, width=width, height=height, csp_errors=True) as page:
        page_signed_in(page=page, base_url=live_server.url, user=lead)
        # Given: no routing source, no card
        page.goto(f"{live_server.url}/projects/{project.pk}/")
        page.wait_for_selector("#db-routing[data-state=ready]", state="attached")
        expect(page.locator("#db-routing")).to_be_hidden()

        _settings(page, live_server.url, project, width)

        # When: the lead routes now
        page.goto(f"{live_server.url}/projects/{project.pk}/")
        card = page.locator("#db-routing")
        expect(card).to_be_visible()
        card.get_by_role("button", name="Route now").click()
        expect(page.locator("#db-routing-message")).to_contain_text("A routing pass is queued.")

        # Then: one chain machine-agreed, one the machines disagree on, both sources usable
        counts = page.locator("#db-routing-chains tbody td:nth-child(2)")
        expect(counts).to_have_text(["1", "0", "0", "1", "0"], timeout=20_000)
        expect(page.locator("#db-routing-chains tbody td:nth-child(1)")).to_have_text(
            [
                "Machine-agreed",
                "Spot checks waiting",
                "Spot checks checked",
                "Machines disagree",
                "Second looks",
            ]
        )
        sources = page.locator("#db-routing-sources tbody tr")
        expect(sources).to_have_count(2)
        expect(sources.nth(0)).to_contain_text("Monte-Carlo rollouts")
        expect(sources.nth(0).locator("td").nth(1)).to_have_text("1.00")
        expect(sources.nth(1).locator("td").nth(3)).to_have_text("yes")
        expect(page.locator("#db-routing-errors")).to_contain_text("No spot check")
        card.scroll_into_view_if_needed()
        card.screenshot(path=str(ARTIFACTS / f"dashboard-routing-{width}.png"))
        assert page_overflow(page, width) == []

        # And: the data manager marks each chain's routing and filters by it
        page.goto(f"{live_server.url}/projects/{project.pk}/chains/")
        expect(page.locator(".routing-badge")).to_have_count(2)
        page.select_option("#ch-routing", "disagreed")
        rows = page.locator("#ch-rows tr[data-chain]")
        expect(rows).to_have_count(1)
        expect(rows.first).to_have_attribute("data-chain", str(chains["disputed"].pk))
        expect(rows.first.locator(".routing-badge")).to_have_text("machines disagree")
        assert page_overflow(page, width) == []
        page.goto(f"{live_server.url}/projects/{project.pk}/chains/{chains['agreed'].pk}/")
        expect(page.locator("#cp-routing .routing-badge")).to_have_text("machine-agreed")
        page.locator(".project-head").screenshot(path=str(ARTIFACTS / f"chain-routing-{width}.png"))


def test_an_older_reread_does_not_replace_newer_figures(
    live_server: Any, browser: Browser, settings: Any
) -> None:
    # Given: a lead's dashboard with routing's rules set and nothing routed yet
    project = with_rules(ProjectFactory())
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    routing_chains(project)
    counts = ["1", "0", "0", "1", "0"]  # machine-agreed, ..., machines disagree, ...
    try:
        with page_watched(browser=browser, width=1366, height=768, csp_errors=True) as page:
            page_signed_in(page=page, base_url=live_server.url, user=lead)
            page.goto(f"{live_server.url}/projects/{project.pk}/")
            figures = page.locator("#db-routing-chains tbody td:nth-child(2)")
            expect(figures).to_have_text(["0"] * 5)

            # When: "Route now", and the first reread's answer (read before the pass) is
            # held on its way back...
            older = AnswerHeld(page, r".*/api/.*/routing/$")
            page.get_by_role("button", name="Route now").click()
            older.wait()
            # ...while the pass runs and the next reread shows its figures
            chains_route(project=project)
            expect(figures).to_have_text(counts, timeout=15_000)
            older.release()

            # Then: the older answer is dropped
            expect(figures).to_have_text(counts)
    finally:
        worker_broker_flush(settings)  # the pass "Route now" queued, never run
