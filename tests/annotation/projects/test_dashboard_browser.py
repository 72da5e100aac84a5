"""The lead dashboard in a real browser (Debian's chromium driven by Playwright against
pytest-django's live server, under the site's Content-Security-Policy): Chart.js draws
every chart from the dashboard API, and the snapshot and export buttons work."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, time, timedelta
from typing import Any

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, Page

from annotation.datasets.exporters.formats import (
    EXPORT_DESCRIPTIONS,
    EXPORT_FORMATS,
    MONTE_CARLO_FORMATS,
)
from annotation.models import Annotation, Chain, Role, Snapshot
from tests.browser import ARTIFACTS, page_login, page_watched
from tests.factories import (
    ChainFactory,
    MembershipFactory,
    ProjectFactory,
    annotation_with_ratings,
)

CHARTS = ("chart-progress", "chart-throughput", "chart-labels", "chart-agreement", "chart-time")

# Per canvas: the Chart.js chart's datasets (label and data) and how many pixels were
# painted, read from the page itself.
READ_CHARTS = """(ids) => ids.map((id) => {
  const canvas = document.getElementById(id);
  const chart = window.Chart.getChart(canvas);
  const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let painted = 0;
  for (let i = 3; i < pixels.length; i += 4) if (pixels[i] !== 0) painted += 1;
  return {
    id,
    painted,
    datasets: chart ? chart.data.datasets.map((d) => ({label: d.label, data: d.data})) : null,
  };
})"""


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=1280, height=1000, accept_downloads=True) as opened:
        yield opened


def test_dashboard_draws_every_chart_and_exports(live_server: Any, page: Page) -> None:
    # Given: a lead's project with two annotators' work over the last three days
    project = ProjectFactory(overlap=2)
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    ann = MembershipFactory(project=project, user__username="ann").user
    bob = MembershipFactory(project=project, user__username="bob").user
    today = timezone.localdate()
    plan = [  # (days ago, who, labels, seconds)
        (2, ann, [1, 1, 1], 40),
        (2, bob, [1, -1, 1], 65),
        (1, ann, [1, 0, -1], 30),
        (1, bob, [1, 0, -1], 50),
        (0, ann, [-1, 1, 1], 20),
    ]
    chains = [ChainFactory(project=project) for _ in range(3)]
    for n, (ago, who, labels, seconds) in enumerate(plan):
        made = annotation_with_ratings(chain=chains[n // 2], annotator=who, labels=labels)
        Annotation.objects.filter(pk=made.pk).update(
            created_at=timezone.make_aware(
                datetime.combine(today - timedelta(days=ago), time(hour=0, minute=n + 1))
            ),
            duration_ms=seconds * 1000,
        )
    for chain, done in zip(chains, (2, 2, 1), strict=True):
        Chain.objects.filter(pk=chain.pk).update(finished_count=done, is_finished=done >= 2)
    page_login(page=page, base_url=live_server.url, username=lead.username)

    # When: the lead opens the project
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.wait_for_selector("#dashboard[data-state=ready]")

    # Then: every chart is drawn by Chart.js with the API's numbers, and has paint on it
    charts = {row["id"]: row for row in page.evaluate(READ_CHARTS, list(CHARTS))}
    for chart_id in CHARTS:
        assert charts[chart_id]["datasets"], chart_id
        assert charts[chart_id]["painted"] > 1000, chart_id
    assert charts["chart-progress"]["datasets"][0]["data"] == [2, 4, 5]
    assert charts["chart-progress"]["datasets"][1]["data"] == [6, 6, 6]
    assert [(d["label"], d["data"]) for d in charts["chart-throughput"]["datasets"]] == [
        ("ann", [1, 1, 1]),
        ("bob", [1, 1, 0]),
    ]
    assert [d["data"] for d in charts["chart-labels"]["datasets"]] == [
        [5, 2, 2],  # +1
        [0, 2, 0],  # 0
        [1, 2, 1],  # -1
    ]
    assert charts["chart-time"]["datasets"][0]["data"] == [52.5, 40, 20]
    assert page.locator("#db-label-totals").text_content().startswith("+1 9 (")
    assert page.locator("#db-annotators tbody tr").count() == 2
    assert "No gold chains yet." in page.locator("#db-gold-none").text_content()
    assert page.locator("#db-gold-none").is_visible()
    assert page.locator("#bar-chains").get_attribute("value") == "2"
    page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

    # When: the lead freezes a snapshot and exports it as TRL JSON Lines
    # (no snapshot yet: every format but those written from Monte-Carlo labels, disabled)
    offered = [fmt for fmt in EXPORT_FORMATS if fmt not in MONTE_CARLO_FORMATS]
    assert page.locator(".db-export.is-disabled").count() == len(offered)
    # (each export button says what its file holds)
    for fmt in offered:
        button = page.locator(f".db-export[data-format={fmt}]")
        assert button.text_content() == f"Export {fmt}"
        assert button.get_attribute("title") == EXPORT_DESCRIPTIONS[fmt]
    page.get_by_role("button", name="Create a snapshot").click()
    page.wait_for_selector("#db-message.ok")
    assert Snapshot.objects.filter(project=project).count() == 1
    assert page.locator(".db-export.is-disabled").count() == 0
    with page.expect_download() as download:
        page.locator(".db-export[data-format=trl]").click()

    # Then: the file is the snapshot's export
    path = download.value.path()
    lines = open(path, encoding="utf-8").read().splitlines()
    assert lines and all(line.startswith('{"prompt"') for line in lines)

    # And: the trainer-neutral formats hold the snapshot's labels (its default mapping,
    # drop: chain 1's ambiguous second step ends it). Chain 0's step 2 is a 1/-1 tie: kept
    # at the lowest rating, its soft label is the votes' share, 0.5; left out by the
    # snapshot's tie policy, it ends the chain.
    openrlhf = _download(page, "openrlhf")
    by_problem = {row["input"].split(" Step 1: ")[0]: row for row in openrlhf}
    assert by_problem[chains[1].problem.text] == {
        "input": f"{chains[1].problem.text} Step 1: Step 1. ки",
        "value": [1.0],
    }
    assert by_problem[chains[0].problem.text]["value"] in ([1.0, 0.5, 1.0], [1.0])
    assert all(row["input"].count("ки") == len(row["value"]) for row in openrlhf)
    qwen = {row["messages"][1]["content"]: row for row in _download(page, "qwen_prm")}
    assert qwen[chains[1].problem.text]["messages"][2] == {
        "role": "assistant",
        "content": "Step 1.<extra_0>",
    }
    assert qwen[chains[1].problem.text]["labels"] == [True]
    assert qwen[chains[0].problem.text]["labels"] in ([True, False, True], [True])
    page.locator("#db-export-title").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "dashboard-exports.png"), full_page=True)

    # And: the links lead to the review and models pages
    assert page.get_by_role("link", name="Review disagreements").get_attribute("href") == (
        f"/projects/{project.pk}/review/"
    )
    assert page.get_by_role("link", name="Models").get_attribute("href") == (
        f"/projects/{project.pk}/models/"
    )


def _download(page: Page, fmt: str) -> list[dict[str, Any]]:
    """The JSON Lines file the page's export button for ``fmt`` downloads."""
    with page.expect_download() as download:
        page.locator(f".db-export[data-format={fmt}]").click()
    with open(download.value.path(), encoding="utf-8") as stream:
        return [json.loads(line) for line in stream.read().splitlines()]


def test_the_lead_sees_who_flagged_a_chain_and_puts_it_back(live_server: Any, page: Page) -> None:
    # Given: a chain an annotator flagged through their lease, with a reason
    from annotation.labeling.workspace import chain_flag
    from tests.annotation.labeling.claiming import assignment_claim_next

    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    ann = MembershipFactory(project=project, user__username="ann").user
    chain = ChainFactory(project=project)
    lease = assignment_claim_next(project=project, user=ann)
    chain_flag(assignment_id=lease.pk, user=ann, reason="steps 2 and 3 are merged")
    page_login(page=page, base_url=live_server.url, username=lead.username)

    # When: the lead opens the project
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.wait_for_selector("#db-flag-list li")

    # Then: the flagged chain is listed with who flagged it and why
    item = page.locator("#db-flag-list li").first.inner_text()
    assert f"Chain {chain.pk}" in item and "steps 2 and 3 are merged" in item
    assert "flagged by ann" in item
    page.screenshot(path=str(ARTIFACTS / "dashboard_flagged.png"), full_page=True)

    # When: they put it back in the queue
    page.get_by_role("button", name="Put back in the queue").click()
    page.wait_for_selector("#db-message.ok")

    # Then: the chain is back, its flag cleared by the lead, and the list is empty
    chain.refresh_from_db()
    assert not chain.is_flagged and chain.flag_cleared_by == lead
    assert page.locator("#db-flag-list li").count() == 0


def test_one_day_of_work_still_shows_its_points(live_server: Any, page: Page) -> None:
    # Given: a project whose only labels are from today (one point per time series)
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    ann = MembershipFactory(project=project, user__username="ann").user
    annotation_with_ratings(chain=ChainFactory(project=project), annotator=ann, labels=[1, -1])
    page_login(page=page, base_url=live_server.url, username=lead.username)

    # When
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.wait_for_selector("#dashboard[data-state=ready]")

    # Then: both progress series (done and needed) draw a visible marker for the day
    # (and so do the agreement and time series), centred rather than on the axis
    for chart_id in ("chart-progress", "chart-agreement", "chart-time"):
        points = page.evaluate(
            """(id) => {
              const chart = window.Chart.getChart(document.getElementById(id));
              return chart.data.datasets.map((_, i) => chart.getDatasetMeta(i).data.map(
                (point) => [point.options.radius, point.x - chart.chartArea.left]));
            }""",
            chart_id,
        )
        assert points and all(
            len(series) == 1 and series[0][0] > 0 and series[0][1] > 20 for series in points
        ), (chart_id, points)
    page.locator("#chart-progress").screenshot(path=str(ARTIFACTS / "dashboard-one-day.png"))
