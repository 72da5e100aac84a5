"""The comment goes where the annotator means it (Debian's chromium, Playwright, under the
site's Content-Security-Policy): right after a −1 or a 0, c comments on that step though
the cursor moved on; after a +1, or once the cursor is moved by hand, on the current
step. On a phone, each step's own comment button does the same by touch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from annotation.models import Annotation, LabelingMode
from tests.browser import chromium_running, page_signed_in, page_watched, workspace_open
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


@pytest.fixture
def lab() -> dict[str, Any]:
    project = ProjectFactory(labeling_mode=LabelingMode.ALL_STEPS)
    annotator = MembershipFactory(project=project).user
    chain = ChainFactory(project=project, step_count=4)
    return {"project": project, "annotator": annotator, "chain": chain}


def _step(page: Page, number: int) -> Any:
    return page.locator(f"#steps .ws-step[data-index='{number - 1}']")


def _comment(page: Page, number: int) -> str:
    return _step(page, number).locator(".ws-comment").inner_text()


def test_c_comments_the_step_just_rated_wrong_though_the_cursor_moved_on(
    live_server: Any, browser: Browser, lab: dict[str, Any]
) -> None:
    with page_watched(browser=browser, width=1366, height=768, csp_errors=True) as page:
        page_signed_in(page=page, base_url=live_server.url, user=lab["annotator"])
        workspace_open(page=page, base_url=live_server.url, project_id=lab["project"].pk)

        # When: step 1 +1, step 2 −1 (the cursor moves on to step 3), then c
        page.keyboard.press("1")
        page.keyboard.press("3")
        assert page.locator("#steps .is-current").get_attribute("data-index") == "2"
        # Then: step 2 is marked as the comment's place, and c writes there
        assert "is-comment-target" in (_step(page, 2).get_attribute("class") or "")
        page.keyboard.press("c")
        page.keyboard.type("Divides by zero.")
        page.keyboard.press("Enter")
        assert _comment(page, 2) == "Divides by zero."

        # When: step 3 +1 (the cursor moves to step 4), then c: the current step, as
        # before a rating
        page.keyboard.press("1")
        page.keyboard.press("c")
        page.keyboard.type("Looks fine so far.")
        page.keyboard.press("Enter")
        assert _comment(page, 4) == "Looks fine so far."

        # When: step 4 rated 0 (the last step: the cursor stays), k and j by hand, then c:
        # a move by hand means the current step again
        page.keyboard.press("2")
        page.keyboard.press("k")
        page.keyboard.press("c")
        page.keyboard.type("Step 3 note.")
        page.keyboard.press("Escape")
        assert _comment(page, 3) == "Step 3 note."
        assert "c</kbd> or" in (page.locator("#help-dialog").inner_html() or "")

        page.keyboard.press("Enter")
        page.wait_for_selector("#workspace[data-state=empty]")

    comments = dict(
        Annotation.objects.get(chain=lab["chain"], annotator=lab["annotator"])
        .ratings.order_by("step__index")
        .values_list("step__index", "comment")
    )
    assert comments == {0: "", 1: "Divides by zero.", 2: "Step 3 note.", 3: "Looks fine so far."}


def test_on_a_phone_each_step_s_comment_button_comments_that_step(
    live_server: Any, browser: Browser, lab: dict[str, Any]
) -> None:
    with page_watched(browser=browser, width=390, height=844, csp_errors=True) as page:
        page_signed_in(page=page, base_url=live_server.url, user=lab["annotator"])
        workspace_open(page=page, base_url=live_server.url, project_id=lab["project"].pk)
        _step(page, 1).locator(".rate-correct").click()
        _step(page, 2).locator(".rate-incorrect").click()
        _step(page, 2).get_by_role("button", name="Comment on step 2").click()
        box = _step(page, 2).locator(".ws-comment-box")
        assert box.is_visible()
        box.fill("Sign error.")
        box.press("Enter")
        for number in (3, 4):
            _step(page, number).locator(".rate-correct").click()
        page.locator("#btn-submit").click()
        page.wait_for_selector("#workspace[data-state=empty]")
    rating = Annotation.objects.get(chain=lab["chain"], annotator=lab["annotator"]).ratings.get(
        step__index=1
    )
    assert (rating.rating, rating.comment) == (-1, "Sign error.")
