"""Verification in the workspace (issue 23), in Debian's chromium under the site's
Content-Security-Policy: the machine's verdicts show beside the steps, v (or the button,
by touch) accepts them all, a step is overridden with the usual keys, and the submit
records confirmed and overridden from the server's own record. A chain without verdicts
shows none and v says so. At 1366x768 by keyboard and at 390x844 by touch; screenshots
go to tests/artifacts/."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from annotation.models import Annotation, LabelingMode, MachineSource, PrelabelOutcome
from tests.browser import (
    ARTIFACTS,
    page_overflow,
    page_signed_in,
    page_watched,
    workspace_open,
)
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory, machine_labels

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def lab() -> dict[str, Any]:
    """A pre-labeling project (none held out) with a judged chain first in the queue and
    an unjudged one after it."""
    project = ProjectFactory(
        labeling_mode=LabelingMode.ALL_STEPS, prelabels=True, prelabel_holdout=0.0
    )
    annotator = MembershipFactory(project=project).user
    judged = ChainFactory(project=project, step_count=4, priority=2.0)
    machine_labels(chain=judged, ratings=[1, 1, -1, 1], source="judge", run_kind="judge")
    bare = ChainFactory(project=project, step_count=2, priority=1.0)
    return {"project": project, "annotator": annotator, "judged": judged, "bare": bare}


def _step(page: Page, number: int) -> Any:
    return page.locator(f"#steps .ws-step[data-index='{number - 1}']")


def _prelabel_states(page: Page) -> list[str | None]:
    return page.eval_on_selector_all(
        "#steps > li", "rows => rows.map(r => r.dataset.prelabel ?? null)"
    )


def _ratings(page: Page) -> list[str]:
    return page.eval_on_selector_all("#steps > li", "rows => rows.map(r => r.dataset.rating)")


@pytest.mark.parametrize(
    ("width", "height", "touch"), [(1366, 768, False), (390, 844, True)], ids=["desk", "phone"]
)
def test_accept_the_verdicts_override_one_and_submit(
    live_server: Any, browser: Browser, lab: dict[str, Any], width: int, height: int, touch: bool
) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    with page_watched(browser=browser, width=width, height=height, csp_errors=True) as page:
        page_signed_in(page=page, base_url=live_server.url, user=lab["annotator"])
        workspace_open(page=page, base_url=live_server.url, project_id=lab["project"].pk)

        # Then: each step shows the judge's verdict, and the page says how to accept them
        chips = page.locator("#steps .ws-prelabel")
        expect(chips).to_have_count(4)
        assert [c.inner_text().split() for c in chips.all()] == [
            ["JUDGE", "+1"],
            ["JUDGE", "+1"],
            ["JUDGE", "−1"],
            ["JUDGE", "+1"],
        ]
        expect(page.locator("#prelabel-note")).to_be_visible()
        expect(page.locator("#prelabel-source")).to_have_text("Judge")
        expect(page.locator("#btn-accept-prelabels")).to_be_visible()
        assert _ratings(page) == ["", "", "", ""]
        page.screenshot(path=str(ARTIFACTS / f"prelabels-shown-{width}.png"), full_page=True)

        # When: the annotator accepts them all (v, or the button by touch)
        if touch:
            page.locator("#btn-accept-prelabels").click()
        else:
            page.keyboard.press("v")

        # Then: every step carries its verdict, marked as confirmed
        assert _ratings(page) == ["1", "1", "-1", "1"]
        assert _prelabel_states(page) == ["confirmed"] * 4
        expect(page.locator("#btn-accept-prelabels")).to_be_disabled()

        # When: step 3's −1 is overridden with ambiguous (2 on the keyboard, 0 by touch)
        if touch:
            _step(page, 3).locator(".ws-rate-btn.rate-ambiguous").click()
        else:
            page.keyboard.press("k")  # the cursor sat on step 4
            assert page.locator("#steps .is-current").get_attribute("data-index") == "2"
            page.keyboard.press("2")
        assert _ratings(page) == ["1", "1", "0", "1"]
        assert _prelabel_states(page) == ["confirmed", "confirmed", "overridden", "confirmed"]
        page.screenshot(path=str(ARTIFACTS / f"prelabels-overridden-{width}.png"), full_page=True)
        if touch:
            assert page_overflow(page, width) == []

        # When: submitted
        if touch:
            page.locator("#btn-submit").click()
        else:
            page.keyboard.press("Enter")

        # Then: the next chain (no verdicts) is on screen, and the server recorded what
        # each rating did with the verdict it showed
        expect(page.locator("#steps .ws-step")).to_have_count(2)
        annotation = Annotation.objects.get(chain=lab["judged"], annotator=lab["annotator"])
        rows = annotation.ratings.order_by("step__index").values_list(
            "rating", "prelabel", "prelabel_source"
        )
        confirmed = (PrelabelOutcome.CONFIRMED, MachineSource.JUDGE)
        assert [(r, (p, s)) for r, p, s in rows] == [
            (1, confirmed),
            (1, confirmed),
            (0, (PrelabelOutcome.OVERRIDDEN, MachineSource.JUDGE)),
            (1, confirmed),
        ]

        # And: the chain without verdicts shows none; v tells so and rates nothing
        expect(page.locator("#steps .ws-prelabel")).to_have_count(0)
        expect(page.locator("#prelabel-note")).to_be_hidden()
        expect(page.locator("#btn-accept-prelabels")).to_be_hidden()
        page.keyboard.press("v")
        expect(page.locator("#ws-message")).to_have_text("This chain shows no machine verdicts.")
        assert _ratings(page) == ["", ""]
        page.screenshot(path=str(ARTIFACTS / f"prelabels-none-{width}.png"), full_page=True)


def test_v_keeps_what_was_rated_by_hand_and_undo_takes_it_back(
    live_server: Any, browser: Browser, lab: dict[str, Any]
) -> None:
    with page_watched(browser=browser, width=1366, height=768, csp_errors=True) as page:
        page_signed_in(page=page, base_url=live_server.url, user=lab["annotator"])
        workspace_open(page=page, base_url=live_server.url, project_id=lab["project"].pk)

        # When: step 1 is rated −1 by hand first, then v
        page.keyboard.press("3")
        page.keyboard.press("v")

        # Then: the hand rating stays (an override); the rest take the verdicts
        assert _ratings(page) == ["-1", "1", "-1", "1"]
        assert _prelabel_states(page) == ["overridden", "confirmed", "confirmed", "confirmed"]

        # When: undo, once
        page.keyboard.press("u")

        # Then: v's ratings go, the hand rating stays
        assert _ratings(page) == ["-1", "", "", ""]

        # And: the key is in the help
        page.keyboard.press("?")
        expect(page.locator("#help-dialog kbd", has_text="v")).to_have_count(1)
        page.keyboard.press("Escape")


def test_first_error_mode_stops_at_the_first_wrong_verdict(
    live_server: Any, browser: Browser, lab: dict[str, Any]
) -> None:
    # Given: the project stops at the first incorrect step
    project = lab["project"]
    project.labeling_mode = LabelingMode.FIRST_ERROR
    project.save()
    with page_watched(browser=browser, width=1366, height=768, csp_errors=True) as page:
        page_signed_in(page=page, base_url=live_server.url, user=lab["annotator"])
        workspace_open(page=page, base_url=live_server.url, project_id=project.pk)

        # When: v
        page.keyboard.press("v")

        # Then: steps 1 to 3 take the verdicts, step 4 (after the −1) is not asked for
        assert _ratings(page) == ["1", "1", "-1", ""]
        expect(page.locator("#btn-submit")).to_be_enabled()
        page.keyboard.press("Enter")
        expect(page.locator("#steps .ws-step")).to_have_count(2)
        annotation = Annotation.objects.get(chain=lab["judged"], annotator=lab["annotator"])
        assert (
            list(annotation.ratings.values_list("prelabel", flat=True))
            == [PrelabelOutcome.CONFIRMED] * 3
        )


def test_the_widest_source_s_verdicts_keep_clear_of_the_comment_button(
    live_server: Any, browser: Browser
) -> None:
    # Given: Monte-Carlo verdicts (the longest source name) on three of four steps
    project = ProjectFactory(
        labeling_mode=LabelingMode.ALL_STEPS,
        prelabels=True,
        prelabel_source="monte_carlo",
        prelabel_holdout=0.0,
    )
    annotator = MembershipFactory(project=project).user
    chain = ChainFactory(project=project, step_count=4)
    machine_labels(chain=chain, ratings=[1, 0, -1, None], run_kind="rollout")

    with page_watched(browser=browser, width=1366, height=768, csp_errors=True) as page:
        page_signed_in(page=page, base_url=live_server.url, user=annotator)
        workspace_open(page=page, base_url=live_server.url, project_id=project.pk)
        expect(page.locator("#prelabel-source")).to_have_text("Monte-Carlo")
        _step(page, 1).hover()

        # Then: each verdict's words sit inside its pill, right of the comment button,
        # and every pill (the empty place of the step without one too) is as wide
        pencil = _step(page, 1).locator(".ws-comment-btn").bounding_box()
        words = _step(page, 1).locator(".ws-prelabel-source").bounding_box()
        assert pencil and words and pencil["x"] + pencil["width"] <= words["x"], (pencil, words)
        pills = page.eval_on_selector_all(
            "#steps .ws-prelabel",
            "nodes => nodes.map(n => [Math.round(n.getBoundingClientRect().width), "
            "n.scrollWidth <= n.clientWidth])",
        )
        assert len(pills) == 4 and all(inside for _, inside in pills), pills
        assert len({width for width, _ in pills}) == 1, pills
        page.screenshot(path=str(ARTIFACTS / "prelabels-monte-carlo.png"), full_page=True)
