"""Dollar amounts are text, math is math: the workspace on a phone, in Chromium.

GSM8K writes money with `$` ("$1 off ... for every $20"): read as TeX, the words between
two amounts became run-together italics that ran off a 390 px screen (the workspace was
1010 px wide). A `$...$` is math only as TeX writers mean it (``static/js/steplab.js``,
``delimitedMath``). The texts are ProcessBench's (GSM8K and MATH, Apache-2.0)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from annotation.models import Chain, Role, Step
from tests.browser import ARTIFACTS, page_login, page_overflow, page_watched, workspace_open
from tests.factories import MembershipFactory, ProblemFactory, ProjectFactory

pytestmark = pytest.mark.skipif(
    not os.path.exists("/usr/bin/chromium") and not os.environ.get("STEPLAB_CHROMIUM"),
    reason="Debian's chromium package is not installed (make test installs it)",
)

# ProcessBench gsm8k-4, with two of its models' answer lines.
GSM8K_PROBLEM = (
    "A customer’s loyalty card at a store gives them rewards of $1 off their next purchase "
    "for every $20 they spend. Their last shopping trip, they spent $80. This shopping trip, "
    "they spent $43, used their rewards, and applied a coupon that took twice the amount of "
    "rewards off the price. How many dollars did they pay on this shopping trip?"
)
GSM8K_STEPS = [
    "The customer spent $80 on their last shopping trip. For every $20 spent, they get $1 "
    "off their next purchase. First, we calculate the rewards from the last trip: "
    "$80 / $20 = 4 rewards.",
    "The coupon took twice the rewards off: 2 * $4 = $8, so they paid $43 - $4 - $8 = $31.",
    "So, the customer pays **\\boxed{$31}** on this trip.",
    "The answer is $\\boxed{31}$.",
]
# ProcessBench math: dollars that are math.
MATH_STEPS = ["We have $x^2 + 3x = 10$, so $(x+5)(x-2) = 0$.", "Hence $x = 2$ costs $5 less."]


@pytest.fixture
def phone(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=390, height=844) as opened:
        yield opened


def _chain(project: Any, problem: str, steps: list[str]) -> Chain:
    row = ProblemFactory(project=project, text=problem)
    chain = Chain.objects.create(
        project=project,
        problem=row,
        content_hash=f"chain-{row.pk}",
        final_answer="31",
        step_count=len(steps),
    )
    Step.objects.bulk_create(Step(chain=chain, index=i, text=t) for i, t in enumerate(steps))
    return chain


def test_money_stays_text_on_a_phone_and_math_is_still_typeset(
    live_server: Any, phone: Page
) -> None:
    # Given: a GSM8K chain (money) served first, then a MATH one
    project = ProjectFactory()
    _chain(project, GSM8K_PROBLEM, GSM8K_STEPS)
    _chain(project, "Solve $x^2 + 3x = 10$ for $x > 0$.", MATH_STEPS)
    user = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    page_login(page=phone, base_url=live_server.url, username=user.username)

    # When: the annotator opens the workspace on a 390 px phone
    workspace_open(page=phone, base_url=live_server.url, project_id=project.pk)

    # Then: the amounts read as written, nothing runs off the screen, and the boxed
    # answers (one holding money) are typeset without an error
    problem = phone.locator("#problem-text")
    assert problem.locator(".katex").count() == 0
    assert problem.inner_text() == GSM8K_PROBLEM
    steps = phone.locator("#steps > li .ws-text")
    assert steps.nth(0).locator(".katex").count() == 0
    assert "$80 / $20 = 4 rewards" in steps.nth(0).inner_text()
    assert steps.nth(1).locator(".katex").count() == 0
    assert steps.nth(2).locator(".katex").count() == 1
    assert steps.nth(3).locator(".katex").count() == 1
    assert phone.locator("#workspace .katex-error").count() == 0
    assert page_overflow(phone) == []
    phone.screenshot(path=str(ARTIFACTS / "workspace-dollars-390.png"), full_page=True)

    # When: the raw source is asked for, then the page reloaded
    phone.keyboard.press("r")
    phone.reload()
    phone.wait_for_selector("#workspace[data-state=ready]")

    # Then: the toggle stayed where the annotator left it
    assert phone.locator("#btn-raw").get_attribute("aria-pressed") == "true"
    assert phone.locator("#steps .katex").count() == 0
    phone.keyboard.press("r")
    assert steps.nth(3).locator(".katex").count() == 1

    # When: the GSM8K chain is submitted (all correct) and the MATH chain comes
    for _ in GSM8K_STEPS:
        phone.keyboard.press("1")
    phone.keyboard.press("Enter")
    expect(phone.locator("#problem-text")).to_contain_text("Solve")

    # Then: its dollars are math: the problem's two formulas, the steps' three
    assert phone.locator("#problem-text .katex").count() == 2
    assert phone.locator("#steps .katex").count() == 3
    assert "costs $5 less." in phone.locator("#steps").inner_text()
    assert page_overflow(phone) == []
    phone.screenshot(path=str(ARTIFACTS / "workspace-math-390.png"), full_page=True)
