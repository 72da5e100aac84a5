"""The annotator workspace in a real browser: Debian's chromium driven by Playwright
against pytest-django's live server, logged in through the login form, keyboard only.

Screenshots go to tests/artifacts/ (git-ignored) for people to look at; nothing here
asserts a timing (bench/bench_workspace.py measures submit-to-next)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from annotation.labeling.workspace import FLAG_REASON_PREFIX
from annotation.models import (
    Annotation,
    AnnotationSource,
    Assignment,
    AssignmentStatus,
    Chain,
    LabelingMode,
    Project,
    Role,
    Screening,
    ScreeningStatus,
    Step,
    StepRating,
)
from annotation.public_ids import ASSIGNMENT_IDS
from tests.browser import (
    ARTIFACTS,
    page_login,
    page_watched,
    workspace_open,
)
from tests.factories import (
    MembershipFactory,
    ProblemFactory,
    ProjectFactory,
    annotation_with_ratings,
)

pytestmark = pytest.mark.skipif(
    not os.path.exists("/usr/bin/chromium") and not os.environ.get("STEPLAB_CHROMIUM"),
    reason="Debian's chromium package is not installed (make test installs it)",
)

MATH_PROBLEM = (
    "The denominator of a fraction is $7$ less than $3$ times the numerator. If the "
    "fraction is equivalent to $\\frac{2}{5}$, what is the numerator?\n"
    "$$\\frac{x}{3x-7} = \\frac{2}{5}$$"
)
MATH_STEPS = [
    "Let's call the numerator $x$.",
    "So the denominator is $3x-7$.",
    "We know that \\(\\frac{x}{3x-7} = \\frac{2}{5}\\).",
    "So \\[5x = 2(3x-7).\\]",
    "Then $5x = 6x - 14$, and a broken formula $\\frac{1}{$ stays as source.",
    "So $x = 14$.",
]
XSS_SCRIPT = "<script>window.__xss=1</script>"
XSS_IMG = '<img src=x onerror="window.__xss=1">'


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=1200, height=900) as opened:
        yield opened


def chain_create(
    *,
    project: Project,
    problem: str,
    steps: list[str],
    reference_answer: str = "",
    final_answer: str = "14",
) -> Chain:
    """A chain with exactly these step texts."""
    problem_row = ProblemFactory(project=project, text=problem, reference_answer=reference_answer)
    chain = Chain.objects.create(
        project=project,
        problem=problem_row,
        content_hash=f"chain-{problem_row.pk}",
        final_answer=final_answer,
        step_count=len(steps),
    )
    Step.objects.bulk_create(
        [Step(chain=chain, index=i, text=text) for i, text in enumerate(steps)]
    )
    return chain


def annotator_in(project: Project) -> Any:
    return MembershipFactory(project=project, role=Role.ANNOTATOR).user


def step_ratings(page: Page) -> list[str]:
    return page.eval_on_selector_all("#steps > li", "rows => rows.map(r => r.dataset.rating)")


def drafts(page: Page) -> list[str]:
    return page.evaluate(
        "Object.keys(localStorage).filter(k => k.startsWith('steplab:assignment:'))"
    )


def test_grade_whole_chain_with_keyboard_only(live_server: Any, page: Page) -> None:
    # Given: an annotator, an all_steps project with one math chain of six steps
    project = ProjectFactory(labeling_mode=LabelingMode.ALL_STEPS, guidelines="Be strict.")
    chain = chain_create(
        project=project,
        problem=MATH_PROBLEM,
        steps=MATH_STEPS,
        reference_answer="$14$",
    )
    user = annotator_in(project)
    page_login(page=page, base_url=live_server.url, username=user.username)
    workspace_open(page=page, base_url=live_server.url, project_id=project.pk)

    # Then: the math is rendered by KaTeX, and the formula it cannot parse shows as source
    assert page.locator("#problem-text .katex").count() >= 3
    assert page.locator("#problem-text .katex-display").count() == 1
    assert page.locator("#steps .katex-display").count() == 1  # \[...\]
    assert "\\frac{1}{" in page.locator("#steps li").nth(4).inner_text()
    assert page.locator("#reference-text .katex").count() == 1
    page.screenshot(path=str(ARTIFACTS / "workspace_math.png"), full_page=True)

    # When: the raw-source toggle is pressed, the problem reads as typed; again, as math
    page.keyboard.press("r")
    assert page.locator("#problem-text").text_content() == MATH_PROBLEM
    assert page.locator("#problem-text .katex").count() == 0
    page.keyboard.press("r")
    assert page.locator("#problem-text .katex").count() >= 3

    # When: grading by keyboard: +1, comment, -1, 0, undo, ambiguous again, then the rest
    page.keyboard.press("1")  # step 1 correct, moves to step 2
    page.keyboard.press("c")
    page.keyboard.type("The sign is fine but <b>check</b> it.")
    page.keyboard.press("Enter")  # leaves the comment box, does not submit
    page.keyboard.press("3")  # step 2 incorrect
    page.keyboard.press("+")  # step 3 correct
    page.keyboard.press("2")  # step 4 ambiguous
    page.keyboard.press("u")  # undo: step 4 unrated again, and current again
    assert step_ratings(page) == ["1", "-1", "1", "", "", ""]
    page.keyboard.press("0")  # step 4 ambiguous, moves to step 5
    page.keyboard.press("k")  # 4
    page.keyboard.press("ArrowUp")  # 3
    page.keyboard.press("j")  # 4
    page.keyboard.press("ArrowDown")  # 5
    assert page.locator("#steps li.is-current").get_attribute("data-index") == "4"
    page.screenshot(path=str(ARTIFACTS / "workspace_mid_grading.png"), full_page=True)
    assert page.locator("#btn-submit").is_disabled()
    page.keyboard.press("a")  # steps 5 and 6 correct in one key
    assert step_ratings(page) == ["1", "-1", "1", "0", "1", "1"]
    # The comment is shown as text, not markup
    assert page.locator("#steps li").nth(1).locator(".ws-comment b").count() == 0
    page.keyboard.press("?")
    assert page.locator("#help-dialog").is_visible()
    page.keyboard.press("Escape")
    assert not page.locator("#help-dialog").is_visible()
    page.keyboard.press("Enter")  # submit

    # Then: the queue is empty, and the ratings landed in the database
    page.wait_for_selector("#workspace[data-state=empty]")
    annotation = Annotation.objects.get(chain=chain, annotator=user)
    ratings = list(annotation.ratings.order_by("step__index").values_list("rating", "comment"))
    assert [r for r, _ in ratings] == [1, -1, 1, 0, 1, 1]
    assert ratings[1][1] == "The sign is fine but <b>check</b> it."
    assert [c for i, (_, c) in enumerate(ratings) if i != 1] == [""] * 5
    assert annotation.duration_ms is not None and annotation.duration_ms > 0
    assert all(d is not None for d in annotation.ratings.values_list("duration_ms", flat=True))
    # (the workspace names its lease by the public id the API gave it)
    assert annotation.request_id.startswith(
        f"ws-{ASSIGNMENT_IDS.show(annotation.assignment_id, viewer=None)}-"
    )
    assert drafts(page) == []
    # And: the own counts show the submit
    expect(page.locator("#stat-total")).to_have_text("1")
    assert page.locator("#stat-today").text_content() == "1"


def test_first_error_mode_dims_later_steps_and_sends_the_rewrite(
    live_server: Any, page: Page
) -> None:
    # Given: a first_error project with a five-step chain
    project = ProjectFactory(labeling_mode=LabelingMode.FIRST_ERROR)
    chain = chain_create(
        project=project,
        problem="Solve $5x = 2(3x-7)$ for $x$.",
        steps=["$5x = 6x - 14$", "So $x = 7$.", "Check: $5 \\cdot 7 = 35$.", "Yes.", "Done."],
    )
    user = annotator_in(project)
    page_login(page=page, base_url=live_server.url, username=user.username)
    workspace_open(page=page, base_url=live_server.url, project_id=project.pk)
    rows = page.locator("#steps > li")

    # When: step 1 is correct and step 2 incorrect
    page.keyboard.press("1")
    page.keyboard.press("-")

    # Then: steps 3-5 are dimmed and not asked for; the rewrite box invites the fix
    assert [rows.nth(i).evaluate("r => r.classList.contains('is-dimmed')") for i in range(5)] == [
        False,
        False,
        True,
        True,
        True,
    ]
    assert page.locator("#rewrite-wrap").is_visible()
    assert page.locator("#rewrite-step-no").text_content() == "2"
    assert page.locator("#workspace").get_attribute("data-complete") == "true"
    # ...under the step it corrects, starting as that step, with its math previewed
    assert rows.nth(1).locator("#rewrite-wrap").count() == 1
    assert page.locator("#rewrite").input_value() == "So $x = 7$."
    assert page.locator("#rewrite-preview .katex").count() == 1

    # When: the -1 is undone, the later steps are asked for again
    page.keyboard.press("u")
    assert page.locator("#steps > li.is-dimmed").count() == 0
    assert not page.locator("#rewrite-wrap").is_visible()
    assert page.locator("#workspace").get_attribute("data-complete") == "false"

    # When: the -1 is given again, the rewrite written from the keyboard, and submitted
    page.keyboard.press("3")
    page.keyboard.press("w")
    page.keyboard.type("So $x = 14$.")
    page.keyboard.press("Escape")
    page.screenshot(path=str(ARTIFACTS / "workspace_first_error.png"), full_page=True)
    page.keyboard.press("Enter")

    # Then: only the steps up to the first error are rated, and the rewrite is stored
    page.wait_for_selector("#workspace[data-state=empty]")
    annotation = Annotation.objects.get(chain=chain, annotator=user)
    assert list(annotation.ratings.order_by("step__index").values_list("rating", flat=True)) == [
        1,
        -1,
    ]
    assert annotation.rewrite == "So $x = 14$."


def test_reload_mid_chain_restores_ratings_and_comments(live_server: Any, page: Page) -> None:
    # Given: an annotator halfway through a four-step chain, with a comment
    project = ProjectFactory(labeling_mode=LabelingMode.ALL_STEPS)
    chain = chain_create(project=project, problem="What is $2+2$?", steps=["a", "b", "c", "d"])
    user = annotator_in(project)
    page_login(page=page, base_url=live_server.url, username=user.username)
    workspace_open(page=page, base_url=live_server.url, project_id=project.pk)
    assignment_id = page.locator("#workspace").get_attribute("data-assignment")
    page.keyboard.press("1")  # step 1 correct, moves to step 2
    page.keyboard.press("c")
    page.keyboard.type("hmm")
    page.keyboard.press("Escape")
    page.keyboard.press("3")  # step 2 incorrect, moves to step 3

    # When: the page is reloaded
    page.reload()
    page.wait_for_selector("#workspace[data-state=ready]")

    # Then: the same lease is back with its ratings, comment and cursor
    assert page.locator("#workspace").get_attribute("data-assignment") == assignment_id
    assert step_ratings(page) == ["1", "-1", "", ""]
    assert page.locator("#steps > li").nth(1).locator(".ws-comment").text_content() == "hmm"
    assert page.locator("#steps li.is-current").get_attribute("data-index") == "2"
    assert "restored" in page.locator("#ws-message").text_content()

    # When: the rest is graded and submitted
    page.keyboard.press("a")
    page.keyboard.press("Enter")

    # Then: everything typed before the reload landed, and the draft is gone
    page.wait_for_selector("#workspace[data-state=empty]")
    annotation = Annotation.objects.get(chain=chain, annotator=user)
    assert list(annotation.ratings.order_by("step__index").values_list("rating", "comment")) == [
        (1, ""),
        (-1, "hmm"),
        (1, ""),
        (1, ""),
    ]
    assert drafts(page) == []


def test_xss_payload_in_a_step_renders_as_text_and_runs_nothing(
    live_server: Any, page: Page
) -> None:
    # Given: a chain whose problem, steps and final answer carry markup
    project = ProjectFactory()
    chain_create(
        project=project,
        problem=f"Problem {XSS_IMG} with $x$",
        steps=[XSS_SCRIPT, XSS_IMG, f"$x$ then {XSS_IMG} and $\\href{{javascript:1}}{{y}}$"],
        final_answer=XSS_SCRIPT,
    )
    user = annotator_in(project)
    page_login(page=page, base_url=live_server.url, username=user.username)

    # When: the workspace shows it, rendered and raw
    workspace_open(page=page, base_url=live_server.url, project_id=project.pk)
    page.keyboard.press("r")
    page.keyboard.press("r")

    # Then: the payloads are visible text, no element was created from them, nothing ran
    rows = page.locator("#steps > li .ws-text")
    assert rows.nth(0).text_content() == XSS_SCRIPT
    assert rows.nth(1).text_content() == XSS_IMG
    assert XSS_IMG in page.locator("#problem-text").text_content()
    assert page.locator("#final-text").text_content() == XSS_SCRIPT
    assert page.locator("#ws-chain img, #ws-chain script").count() == 0
    assert page.locator("#ws-chain a[href^='javascript']").count() == 0  # KaTeX trust is off
    assert page.evaluate("typeof window.__xss") == "undefined"


def test_lease_lost_keeps_ratings_on_screen(live_server: Any, page: Page) -> None:
    # Given: an annotator grading a chain whose lease then went to someone else
    project = ProjectFactory()
    chain = chain_create(project=project, problem="p", steps=["a", "b"])
    user = annotator_in(project)
    page_login(page=page, base_url=live_server.url, username=user.username)
    workspace_open(page=page, base_url=live_server.url, project_id=project.pk)
    page.keyboard.press("1")
    page.keyboard.press("1")
    Assignment.objects.filter(chain=chain, annotator=user).update(status=AssignmentStatus.EXPIRED)
    other = annotator_in(project)
    Assignment.objects.create(
        project=project,
        chain=chain,
        annotator=other,
        expires_at=chain.created_at.replace(year=chain.created_at.year + 1),
    )

    # When: the annotator submits
    page.keyboard.press("Enter")

    # Then: the page says the lease is lost, and the ratings stay on screen
    page.wait_for_selector("#workspace[data-lease=lost]")
    assert "lost" in page.locator("#ws-message").text_content()
    assert step_ratings(page) == ["1", "1"]
    assert not Annotation.objects.filter(annotator=user).exists()


def test_skip_and_flag_with_a_reason_from_the_keyboard(live_server: Any, page: Page) -> None:
    # Given: two chains to label
    project = ProjectFactory()
    first = chain_create(project=project, problem="first", steps=["a"])
    second = chain_create(project=project, problem="second", steps=["b"])
    user = annotator_in(project)
    page_login(page=page, base_url=live_server.url, username=user.username)
    workspace_open(page=page, base_url=live_server.url, project_id=project.pk)
    assert page.locator("#problem-text").text_content() == "first"

    # When: s, the second common reason (arrow down twice), Enter skips the first chain
    page.keyboard.press("s")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")

    # Then: the skip is recorded with the reason and the second chain is on screen
    expect(page.locator("#problem-text")).to_have_text("second")
    skipped = Assignment.objects.get(chain=first, annotator=user)
    assert (skipped.status, skipped.skip_reason) == (
        AssignmentStatus.SKIPPED,
        "Too long to grade now",
    )

    # When: f, a typed reason, Enter flags the second chain
    page.keyboard.press("f")
    page.keyboard.type("3 steps are merged")  # digits are text here, never a shortcut
    page.keyboard.press("Enter")

    # Then: the chain is flagged, and the queue is empty
    page.wait_for_selector("#workspace[data-state=empty]")
    second.refresh_from_db()
    assert second.is_flagged
    assert Assignment.objects.get(chain=second).skip_reason == (
        f"{FLAG_REASON_PREFIX}3 steps are merged"
    )
    assert page.locator("#ws-empty h2").text_content() == "Nothing left to label"
    page.screenshot(path=str(ARTIFACTS / "workspace_nothing_left.png"))


def test_lease_is_renewed_quietly_at_half_the_lease(live_server: Any, page: Page) -> None:
    # Given: a one-minute lease, and the page's clock under the test's control
    project = ProjectFactory(lease_minutes=1)
    chain = chain_create(project=project, problem="p", steps=["a"])
    user = annotator_in(project)
    page_login(page=page, base_url=live_server.url, username=user.username)
    page.clock.install()
    workspace_open(page=page, base_url=live_server.url, project_id=project.pk)
    first_expiry = Assignment.objects.get(chain=chain).expires_at

    # When: half the lease passes on the page's clock
    with page.expect_response(lambda r: r.url.endswith("/renew/")) as renewed:
        page.clock.run_for(31_000)

    # Then: the page renewed the lease, and says nothing about it
    assert renewed.value.status == 200
    assert Assignment.objects.get(chain=chain).expires_at > first_expiry
    assert page.locator("#ws-message").is_hidden()


def test_prefetched_chain_shows_after_submit_without_a_next_request(
    live_server: Any, page: Page
) -> None:
    # Given: three math chains to label
    project = ProjectFactory(labeling_mode=LabelingMode.ALL_STEPS)
    chains = [
        chain_create(project=project, problem=f"Chain {n}: is $x^{n} = {n}$?", steps=["$a$", "b"])
        for n in range(3)
    ]
    user = annotator_in(project)
    page_login(page=page, base_url=live_server.url, username=user.username)
    requests: list[str] = []
    page.on("request", lambda request: requests.append(f"{request.method} {request.url}"))

    # When: the workspace shows the first chain, it prefetches the second in the background
    with page.expect_response(lambda r: r.url.endswith("/assignments/prefetch/")) as prefetch:
        workspace_open(page=page, base_url=live_server.url, project_id=project.pk)
    assert prefetch.value.status == 200
    prefetched_id = str(prefetch.value.json()["assignment"]["id"])
    first_id = page.locator("#workspace").get_attribute("data-assignment")
    assert first_id != prefetched_id
    live = Assignment.objects.filter(annotator=user, status=AssignmentStatus.ACTIVE)
    assert sorted(live.values_list("chain_id", flat=True)) == [chains[0].pk, chains[1].pk]

    # When: the first chain is graded and submitted
    requests.clear()
    page.keyboard.press("a")
    page.keyboard.press("Enter")

    # Then: the prefetched chain is on screen, math typeset, without asking for a next chain
    page.wait_for_selector(f"#workspace[data-assignment='{prefetched_id}']")
    assert page.locator("#problem-text").text_content().startswith("Chain 1")
    assert page.locator("#problem-text .katex").count() == 1
    sent = [r for r in requests if "/api/v1/" in r]
    assert f"POST {live_server.url}/api/v1/assignments/{first_id}/submit/" in sent
    assert not any(r.endswith("/assignments/next/") or "submit-and-next" in r for r in sent)
    assert Annotation.objects.filter(chain=chains[0], annotator=user).exists()

    # When: the second and third chains are graded the same way
    page.wait_for_selector("#workspace[data-prefetched]")
    page.keyboard.press("a")
    page.keyboard.press("Enter")
    # A locator assertion, not wait_for_function: the CSP forbids evaluating strings.
    expect(page.locator("#problem-text")).to_have_text(re.compile(r"^Chain 2"))
    page.keyboard.press("a")
    page.keyboard.press("Enter")

    # Then: every submit landed, the queue is empty, and no lease is left behind
    page.wait_for_selector("#workspace[data-state=empty]")
    assert Annotation.objects.filter(annotator=user).count() == 3
    assert not live.exists()
    assert drafts(page) == []


def test_gold_accuracy_and_a_failed_screening_are_shown(live_server: Any, page: Page) -> None:
    # Given: a screening project; yesterday the annotator graded its gold chain
    # (+1, -1, +1) against the key (+1, +1, +1), and failed the screening
    project = ProjectFactory(screening_chains=1, screening_pass_accuracy=0.9)
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    user = annotator_in(project)
    gold = chain_create(project=project, problem="gold", steps=["a", "b", "c"])
    key = Annotation.objects.create(
        chain=gold, source=AnnotationSource.ADJUDICATION, annotator=lead
    )
    StepRating.objects.bulk_create(
        StepRating(annotation=key, step=step, rating=1) for step in gold.steps.all()
    )
    Chain.objects.filter(pk=gold.pk).update(is_gold=True, gold_annotation=key)
    mine = annotation_with_ratings(chain=gold, annotator=user, labels=[1, -1, 1])
    Annotation.objects.filter(pk=mine.pk).update(created_at=mine.created_at - timedelta(days=1))
    Screening.objects.create(
        project=project, annotator=user, status=ScreeningStatus.FAILED, chains=1
    )
    chain_create(project=project, problem="real work", steps=["x"])
    page_login(page=page, base_url=live_server.url, username=user.username)

    # When: the workspace opens
    workspace_open(page=page, base_url=live_server.url, project_id=project.pk)

    # Then: no real work is handed out, the empty page says why, and the gold score shows
    assert page.locator("#workspace").get_attribute("data-state") == "empty"
    page.wait_for_selector("#stat-gold-wrap:not([hidden])")
    assert page.locator("#stat-gold").text_content() == "67 %"
    assert "did not pass screening" in page.locator("#ws-empty-screening").text_content()
    assert page.locator("#ws-screening").is_visible()


def test_boxed_answers_outside_math_render_and_an_empty_final_answer_stays_hidden(
    live_server: Any, page: Page
) -> None:
    # Given: model output that boxes its answers without $...$, and no final answer
    project = ProjectFactory()
    chain_create(
        project=project,
        problem="What is half of one?",
        steps=[
            "Halve it: \\boxed{\\frac{1}{2}} is the answer.",
            "Already math: $\\boxed{3}$ and plain text.",
            "An unclosed \\boxed{2 stays as written.",
        ],
        final_answer="   ",
    )
    user = annotator_in(project)
    page_login(page=page, base_url=live_server.url, username=user.username)

    # When
    workspace_open(page=page, base_url=live_server.url, project_id=project.pk)

    # Then: each box is typeset once, the unclosed one is left as text, and the empty
    # final-answer card is not on screen
    rows = page.locator("#steps > li .ws-text")
    assert rows.nth(0).locator(".katex").count() == 1
    assert rows.nth(0).locator(".katex .frac-line").count() == 1
    assert rows.nth(1).locator(".katex").count() == 1
    assert rows.nth(2).locator(".katex").count() == 0
    assert "\\boxed{2 stays" in rows.nth(2).text_content()
    assert not page.locator("#final-wrap").is_visible()
    page.screenshot(path=str(ARTIFACTS / "workspace-boxed.png"), full_page=True)
    # ...and the raw view shows the source as it came
    page.keyboard.press("r")
    assert rows.nth(0).text_content() == "Halve it: \\boxed{\\frac{1}{2}} is the answer."


def test_a_rewrite_left_as_the_step_is_not_sent(live_server: Any, page: Page) -> None:
    # Given: a first_error chain whose step 1 is marked wrong, the box opened and left as is
    project = ProjectFactory(labeling_mode=LabelingMode.FIRST_ERROR)
    chain = chain_create(project=project, problem="What is 2 + 2?", steps=["It is 5.", "Done."])
    user = annotator_in(project)
    page_login(page=page, base_url=live_server.url, username=user.username)
    workspace_open(page=page, base_url=live_server.url, project_id=project.pk)
    page.keyboard.press("-")
    page.keyboard.press("w")
    page.keyboard.press("Escape")

    # When
    page.keyboard.press("Enter")

    # Then: the rating is stored, and no rewrite (the step's own text is no correction)
    page.wait_for_selector("#workspace[data-state=empty]")
    annotation = Annotation.objects.get(chain=chain, annotator=user)
    assert annotation.rewrite == ""
    assert list(annotation.ratings.values_list("rating", flat=True)) == [-1]
    # ...and the empty page sums up the day
    expect(page.locator("#ws-empty-summary")).to_have_text(
        "Today: 1 chain, 1 step rated; 1 in total."
    )
