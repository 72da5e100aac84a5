"""An annotator's history in a real browser (Debian's chromium driven by Playwright against
pytest-django's live server, under the site's Content-Security-Policy), at a laptop's
1366x768 and a phone's 390 px: two chains submitted through the API, the empty workspace
links to the history, the list shows both newest first, and one reopens read-only with
its ratings, comment and rewrite, math typeset. Screenshots go to tests/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from annotation.models import Chain, LabelingMode, Project, Role, Step
from annotation.public_ids import CHAIN_IDS
from tests.browser import (
    ARTIFACTS,
    chromium_running,
    page_login,
    page_overflow,
    page_watched,
    workspace_open,
)
from tests.factories import (
    ChainFactory,
    MembershipFactory,
    ProblemFactory,
    ProjectFactory,
    annotation_with_ratings,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WIDTHS = {"1366": (1366, 768), "390": (390, 844)}
XSS = '<img src=x onerror="window.__xss=1">'


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


@pytest.fixture(params=list(WIDTHS))
def width(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def page(browser: Browser, width: str) -> Iterator[Page]:
    w, h = WIDTHS[width]
    with page_watched(browser=browser, width=w, height=h, csp_errors=True) as opened:
        yield opened


def chain_create(*, project: Project, problem: str, steps: list[str], priority: float) -> Chain:
    problem_row = ProblemFactory(project=project, text=problem, reference_answer="$x = 2$")
    chain = Chain.objects.create(
        project=project,
        problem=problem_row,
        content_hash=f"chain-{problem_row.pk}",
        final_answer="\\boxed{2}",
        step_count=len(steps),
        priority=priority,
    )
    Step.objects.bulk_create(Step(chain=chain, index=i, text=t) for i, t in enumerate(steps))
    return chain


def _shot(page: Page, name: str, width: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}-{width}.png"), full_page=True)


def _no_sideways_scroll(page: Page) -> None:
    assert page_overflow(page) == [], "the page scrolls sideways"


SUBMIT_NEXT = """async ({next, ratings, comments, rewrite}) => {
  const {api} = await import("/static/js/steplab.js");
  const lease = await api(next, {method: "POST"});
  const body = {
    ratings: lease.chain.steps.map((step, i) => ({
      step: step.id, rating: ratings[i], comment: comments[i] || "",
    })),
    rewrite,
  };
  await api(`/api/v1/assignments/${lease.assignment.id}/submit/`, {method: "POST", body});
  return lease.chain.id;
}"""


def test_annotator_reopens_a_submitted_chain_with_their_ratings(
    live_server: Any, page: Page, width: str
) -> None:
    # Given: an annotator in an all_steps project with two chains, the math one served first
    project = ProjectFactory(labeling_mode=LabelingMode.ALL_STEPS, name="Algebra, round 2")
    user = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    math = chain_create(
        project=project,
        problem=f"Solve $3x - 1 = 5$ for $x$. {XSS}\nGive the exact value.",
        steps=[
            "Add $1$ to both sides: $3x = 6$.",
            "Hmm, or subtract? Let's see.",
            "Divide by $3$: $$x = -2$$",
            "So the answer is \\boxed{2}.",
        ],
        priority=2.0,
    )
    plain = chain_create(
        project=project,
        problem="What is $6 \\times 7$?",
        steps=["$6 \\times 7 = 42$.", "So the answer is $42$.", "Done."],
        priority=1.0,
    )
    page_login(page=page, base_url=live_server.url, username=user.username)
    history = f"{live_server.url}/projects/{project.pk}/history/"

    # When: nothing submitted yet, the history says so
    page.goto(history)
    page.wait_for_selector("#history[data-state=list]")
    expect(page.locator("#hist-empty")).to_be_visible()

    # And: both chains are submitted through the API (the page's own session and helper)
    next_url = f"/api/v1/projects/{project.pk}/assignments/next/"
    first = page.evaluate(
        SUBMIT_NEXT,
        {
            "next": next_url,
            "ratings": [1, 0, -1, 1],
            "comments": ["", "", f"The sign flipped. {XSS}"],
            "rewrite": "Divide by $3$: $$x = 2$$",
        },
    )
    second = page.evaluate(
        SUBMIT_NEXT, {"next": next_url, "ratings": [1, 1, 1], "comments": [], "rewrite": ""}
    )
    assert (first, second) == (
        CHAIN_IDS.show(math.pk, viewer=user.pk),
        CHAIN_IDS.show(plain.pk, viewer=user.pk),
    )

    # Then: the workspace has nothing left and links to the history from its summary
    workspace_open(page=page, base_url=live_server.url, project_id=project.pk)
    expect(page.locator("#ws-empty")).to_be_visible()
    expect(page.locator("#ws-empty-summary")).to_contain_text("Today: 2 chains, 7 steps")
    _shot(page, "history_workspace_empty", width)
    page.click("#ws-empty-history")
    page.wait_for_url(history)

    # And: the history lists both, newest first, each summed up
    page.wait_for_selector("#history[data-state=list][data-entries='2']")
    entries = page.locator("#hist-list > li")
    expect(entries).to_have_count(2)
    expect(entries.nth(0)).to_contain_text("What is")
    expect(entries.nth(0)).to_contain_text("3 of 3 steps rated")
    expect(entries.nth(0)).to_contain_text("no error")
    expect(entries.nth(1)).to_contain_text("Solve")
    expect(entries.nth(1)).not_to_contain_text("Give the exact value")  # the first line only
    expect(entries.nth(1)).to_contain_text("4 of 4 steps rated")
    expect(entries.nth(1).locator(".hist-labels")).to_have_text("+2 / 1 / −1")
    expect(entries.nth(1)).to_contain_text("first error: step 3")
    expect(entries.nth(1)).to_contain_text("1 comment")
    assert entries.nth(0).locator(".katex").count() > 0  # math typeset in the list too
    _no_sideways_scroll(page)
    _shot(page, "history", width)

    # When: the older one is reopened
    entries.nth(1).locator("a").click()
    page.wait_for_selector("#history[data-state=chain]")

    # Then: read-only, with the annotator's ratings, comment and rewrite, math typeset
    assert page.url.endswith(f"#annotation-{page.get_attribute('#history', 'data-annotation')}")
    rows = page.locator("#hist-steps > li")
    expect(rows).to_have_count(4)
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.rating)") == ["1", "0", "-1", "1"]
    expect(rows.nth(2).locator(".ws-rate-btn")).to_have_text("−1")
    expect(rows.nth(2).locator(".ws-comment")).to_have_text(f"The sign flipped. {XSS}")
    expect(rows.nth(2).locator(".hist-rewrite")).to_contain_text("Corrected step 3")
    assert rows.nth(2).locator(".hist-rewrite .katex").count() > 0
    expect(page.locator("#hist-chain-summary")).to_contain_text("first error at step 3")
    expect(page.locator("#hist-reference-wrap")).to_be_visible()
    assert page.locator("#hist-problem .katex").count() > 0
    assert page.locator("#hist-final .katex").count() > 0  # \boxed{2} outside $...$
    # The steps carry no controls until the annotator asks to revise (still open to change)
    assert page.locator("#hist-steps button, #hist-steps textarea").count() == 0
    expect(page.locator("#hist-edit")).to_be_visible()
    assert page.evaluate("window.__xss") is None  # imported text and comments stay text
    _no_sideways_scroll(page)
    _shot(page, "history_chain", width)

    # And: back to the list
    page.click("#hist-back")
    page.wait_for_selector("#history[data-state=list]")
    expect(page.locator("#hist-list > li")).to_have_count(2)


def test_a_lead_pages_through_a_member_s_long_history(
    live_server: Any, page: Page, width: str
) -> None:
    # Given: a member with 60 submitted chains, the last one rated −1 at step 2
    project = ProjectFactory(name="Long history")
    member = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    for n in range(60):
        chain = ChainFactory(project=project)
        annotation_with_ratings(
            chain=chain, annotator=member, labels=[1, -1, 1] if n == 59 else [1, 1, 1]
        )
    page_login(page=page, base_url=live_server.url, username=lead.username)

    # When: the lead follows the member's name on the dashboard
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.click(f"a[href$='/history/?annotator={member.pk}']")
    page.wait_for_selector("#history[data-state=list][data-entries='50']")

    # Then: the member's history, a page of 50, then the 10 older ones
    expect(page.locator("h1")).to_have_text(f"History of {member.username}")
    expect(page.locator("#hist-more")).to_be_visible()
    page.click("#hist-more")
    page.wait_for_selector("#history[data-entries='60']")
    expect(page.locator("#hist-more")).to_be_hidden()
    # And: the newest reopens with the member's ratings
    page.locator("#hist-list > li").first.locator("a").click()
    page.wait_for_selector("#history[data-state=chain]")
    rows = page.locator("#hist-steps > li")
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.rating)") == ["1", "-1", "1"]
    _no_sideways_scroll(page)
    _shot(page, "history_lead", width)
