"""The review page in a real browser (Debian's chromium driven by Playwright against
pytest-django's live server, under the site's Content-Security-Policy): a lead adjudicates
a disagreeing chain with the keyboard, then again with the mouse; each ruling lands in the
database as a new revision and shows in the history with who and when."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from annotation.models import Annotation, AnnotationSource, Chain, Role
from annotation.quality.chain_agreement import chains_agreement_refresh
from tests.browser import ARTIFACTS, page_login, page_watched
from tests.factories import (
    ChainFactory,
    MembershipFactory,
    ProblemFactory,
    ProjectFactory,
    annotation_with_ratings,
)

XSS_IMG = '<img src=x onerror="window.__xss=1">'


def _lead_and_two_annotators() -> tuple[Any, Any, Any, Any]:
    """A project with overlap 2, its lead, and annotators "ann" and "bob"."""
    project = ProjectFactory(overlap=2)
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    ann = MembershipFactory(project=project, user__username="ann").user
    bob = MembershipFactory(project=project, user__username="bob").user
    return project, lead, ann, bob


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=1280, height=900, csp_errors=True) as opened:
        yield opened


def test_lead_adjudicates_a_disputed_chain_by_keyboard_then_mouse(
    live_server: Any, page: Page
) -> None:
    # Given: two annotators disagree on step 2 of a math chain, and agree on another chain
    project, lead, ann, bob = _lead_and_two_annotators()
    problem = ProblemFactory(project=project, text=f"Solve $5x = 2(3x-7)$ for $x$. {XSS_IMG}")
    disputed = ChainFactory(project=project, problem=problem, step_count=3)
    disputed.steps.filter(index=1).update(text="So $x = 7$, since \\(\\frac{35}{5} = 7\\).")
    annotation_with_ratings(chain=disputed, annotator=ann, labels=[1, 1, 1])
    annotation_with_ratings(chain=disputed, annotator=bob, labels=[1, -1, 1])
    calm = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=calm, annotator=ann, labels=[1, 1])
    annotation_with_ratings(chain=calm, annotator=bob, labels=[1, 1])
    # Both finished by their two passes, as the queue leaves them
    Chain.objects.filter(project=project).update(finished_count=2, is_finished=True)
    chains_agreement_refresh(chains=Chain.objects.filter(project=project))
    page_login(page=page, base_url=live_server.url, username=lead.username)

    # When: the lead opens the review page
    page.goto(f"{live_server.url}/projects/{project.pk}/review/")
    page.wait_for_selector("#review[data-state=ready]")

    # Then: only the disputed chain is listed, and it is open with both annotators' columns
    assert page.locator("#rv-list .rv-item").count() == 1
    assert page.locator("#review").get_attribute("data-chain") == str(disputed.pk)
    assert page.locator("#rv-grid thead th .rv-voter").all_text_contents() == ["ann", "bob"]
    assert page.locator("#rv-grid tbody tr.is-disputed").count() == 1
    assert page.locator("#rv-problem .katex").count() == 2  # math rendered
    assert page.locator("#rv-grid .katex").count() == 2
    assert XSS_IMG in page.locator("#rv-problem").text_content()  # markup shown as text
    assert page.locator("#rv-chain img").count() == 0
    assert page.evaluate("() => typeof window.__xss") == "undefined"
    # The cursor starts on the disputed step
    assert page.locator("#rv-grid tbody tr.is-current").get_attribute("data-index") == "1"
    # ...whose 1-1 split is shown as a tie, not as a consensus to take
    majority = page.locator("#rv-grid tbody tr").nth(1).locator("td.rv-majority")
    assert majority.inner_text() == "tie (+1 / −1)"
    assert "rv-tie" in (majority.get_attribute("class") or "")
    assert page.locator("#rv-grid td.rv-majority.rv-tie").count() == 1

    # When: keyboard only: step 2 incorrect, the rest from consensus, a note, Enter
    page.keyboard.press("3")
    page.keyboard.press("a")
    page.keyboard.press("c")
    page.keyboard.type("Step 2 divides wrongly: <b>x = 14</b>.")
    page.keyboard.press("Escape")
    page.screenshot(path=str(ARTIFACTS / "review_page.png"), full_page=True)
    page.keyboard.press("Enter")

    # Then: the ruling is a new adjudication revision in the database, shown in the history
    page.wait_for_selector("#rv-message.ok")
    first = Annotation.objects.get(chain=disputed, source=AnnotationSource.ADJUDICATION)
    assert first.annotator == lead
    assert first.note == "Step 2 divides wrongly: <b>x = 14</b>."
    assert list(first.ratings.order_by("step__index").values_list("rating", flat=True)) == [
        1,
        -1,
        1,
    ]
    page.wait_for_selector(f"#rv-history li[data-annotation='{first.pk}']")
    entry = page.locator(f"#rv-history li[data-annotation='{first.pk}']")
    assert lead.username in entry.text_content()
    assert "adjudication" in entry.text_content()
    assert page.locator("#rv-history b").count() == 0  # the note is text
    # ...and the chain is resolved: it leaves the list and the count falls, but stays open
    expect(page.locator("#rv-list .rv-item")).to_have_count(0)
    expect(page.locator("#rv-count")).to_have_text("(0)")
    assert page.locator("#review").get_attribute("data-chain") == str(disputed.pk)

    # When: the lead changes their mind with the mouse: step 2 ambiguous, Save
    page.locator("#rv-grid tbody tr").nth(1).get_by_role("button", name="Rule step 2 0").click()
    page.get_by_role("button", name="Save adjudication").click()

    # Then: a second revision supersedes the first; the first is kept, both are listed
    # A locator assertion, not wait_for_function: the CSP forbids evaluating strings.
    expect(page.locator("#rv-history li")).to_have_count(4)
    second = Annotation.objects.filter(chain=disputed, source=AnnotationSource.ADJUDICATION).latest(
        "id"
    )
    assert second.pk != first.pk and second.supersedes_id == first.pk
    assert list(second.ratings.order_by("step__index").values_list("rating", flat=True)) == [
        1,
        0,
        1,
    ]
    history = page.locator("#rv-history li").all_text_contents()
    assert any("superseded" in text and f"#{first.pk}" in text for text in history)
    assert Chain.objects.get(pk=calm.pk).annotations.count() == 2  # untouched

    # When: the lead asks to see the resolved chains too
    page.locator("#rv-resolved").check()

    # Then: it is back in the list, marked resolved
    expect(page.locator("#rv-list .rv-item")).to_have_count(1)
    expect(page.locator("#rv-list .rv-item").first).to_contain_text("resolved")
    expect(page.locator("#rv-count")).to_have_text("(1)")
    page.screenshot(path=str(ARTIFACTS / "review_resolved.png"), full_page=True)

    # ...and reads "resolved" on its chain page and in the data manager's finished filter
    page.goto(f"{live_server.url}/projects/{project.pk}/chains/{disputed.pk}/")
    page.wait_for_selector("#chain[data-state=ready]")
    expect(page.locator("#cp-status")).to_have_text("resolved")
    page.screenshot(path=str(ARTIFACTS / "chain_resolved.png"), full_page=True)
    page.goto(f"{live_server.url}/projects/{project.pk}/chains/")
    page.wait_for_selector("#chains[data-state=ready]")
    page.locator("#ch-status").select_option("finished")
    rows = page.locator("#ch-rows tr")
    expect(rows).to_have_count(2)
    expect(page.locator(f"#ch-rows tr[data-chain='{disputed.pk}'] td").nth(3)).to_have_text(
        "resolved"
    )
    expect(page.locator(f"#ch-rows tr[data-chain='{calm.pk}'] td").nth(3)).to_have_text("finished")
    assert "disputed" not in page.locator("#ch-rows").inner_text()
    page.screenshot(path=str(ARTIFACTS / "chains_resolved.png"), full_page=True)


def test_review_page_says_so_when_nobody_disagrees(live_server: Any, page: Page) -> None:
    project = ProjectFactory(overlap=2)
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    page_login(page=page, base_url=live_server.url, username=lead.username)
    page.goto(f"{live_server.url}/projects/{project.pk}/review/")
    page.wait_for_selector("#review[data-state=empty]")
    assert page.locator("#rv-empty").is_visible()


def test_taking_the_consensus_leaves_a_tie_for_the_lead(live_server: Any, page: Page) -> None:
    """A tie has no consensus to take, and a ruling that leaves it out resolves nothing:
    the page says which disputed step has no ruling before it saves, and the chain stays
    in the list until the tie is ruled too."""
    # Given: two annotators split 1-1 on step 2 and agree elsewhere
    project, lead, ann, bob = _lead_and_two_annotators()
    chain = ChainFactory(project=project, step_count=3)
    annotation_with_ratings(chain=chain, annotator=ann, labels=[1, 1, 1])
    annotation_with_ratings(chain=chain, annotator=bob, labels=[1, -1, 1])
    page_login(page=page, base_url=live_server.url, username=lead.username)
    page.goto(f"{live_server.url}/projects/{project.pk}/review/")
    page.wait_for_selector("#review[data-state=ready]")
    # (the keys act on the highlighted step: the first disputed one)
    expect(page.locator("#rv-grid tr.is-current")).to_have_attribute("data-index", "1")

    # When: the lead takes the consensus and saves
    page.keyboard.press("a")
    page.keyboard.press("Enter")

    # Then: nothing is saved yet: the page names the tie and highlights it
    expect(page.locator("#rv-message")).to_contain_text("Disputed step 2 has no ruling")
    expect(page.locator("#rv-grid tr.is-current")).to_have_attribute("data-index", "1")
    assert not Annotation.objects.filter(chain=chain, source=AnnotationSource.ADJUDICATION)

    # When: they save again, keeping the partial ruling
    page.keyboard.press("Enter")

    # Then: the ruling covers the agreed steps only, and the chain is still to review
    expect(page.locator("#rv-message")).to_contain_text("stays in the list")
    ruling = Annotation.objects.get(chain=chain, source=AnnotationSource.ADJUDICATION)
    assert list(ruling.ratings.order_by("step__index").values_list("step__index", "rating")) == [
        (0, 1),
        (2, 1),
    ]
    expect(page.locator("#rv-list .rv-item")).to_have_count(1)
    expect(page.locator("#rv-list .rv-item")).not_to_contain_text("resolved")

    # When: they rule the tie (the highlighted step) and save
    expect(page.locator("#rv-grid tr.is-current")).to_have_attribute("data-index", "1")
    page.keyboard.press("3")
    page.keyboard.press("Enter")

    # Then: the chain is resolved and leaves the list
    expect(page.locator("#rv-list .rv-item")).to_have_count(0)
    current = Annotation.objects.get(
        chain=chain, source=AnnotationSource.ADJUDICATION, superseded_by__isnull=True
    )
    assert list(current.ratings.order_by("step__index").values_list("step__index", "rating")) == [
        (0, 1),
        (1, -1),
        (2, 1),
    ]


def test_after_a_ruling_the_page_moves_to_the_next_disagreement(
    live_server: Any, page: Page
) -> None:
    # Given: two disputed chains, on problems with a reference answer
    project, lead, ann, bob = _lead_and_two_annotators()
    chains = []
    for n in range(2):
        problem = ProblemFactory(
            project=project, text=f"What is {n} + 1?", reference_answer=str(n + 1)
        )
        chain = ChainFactory(project=project, problem=problem, step_count=2)
        annotation_with_ratings(chain=chain, annotator=ann, labels=[1, 1])
        annotation_with_ratings(chain=chain, annotator=bob, labels=[1, -1])
        chains.append(chain)
    page_login(page=page, base_url=live_server.url, username=lead.username)
    page.goto(f"{live_server.url}/projects/{project.pk}/review/")
    page.wait_for_selector("#review[data-state=ready]")
    first = int(page.locator("#review").get_attribute("data-chain") or 0)
    # The problem's reference answer is beside the chain's own
    assert page.locator("#rv-reference-wrap").is_visible()
    expected = next(c for c in chains if c.pk == first).problem.reference_answer
    assert page.locator("#rv-reference").inner_text() == expected

    # When: the lead rules on step 2 and saves
    page.keyboard.press("3")
    page.keyboard.press("a")
    page.keyboard.press("Enter")

    # Then: the next disagreement opens
    expect(page.locator("#review")).not_to_have_attribute("data-chain", str(first))
    assert {int(page.locator("#review").get_attribute("data-chain") or 0), first} == {
        chain.pk for chain in chains
    }
    assert Annotation.objects.filter(chain_id=first, source=AnnotationSource.ADJUDICATION).exists()


def test_the_list_filters_by_annotator_and_by_agreement(live_server: Any, page: Page) -> None:
    # Given: ann and bob split on one step of a three-step chain; ann and cid on all three
    project, lead, ann, bob = _lead_and_two_annotators()
    cid = MembershipFactory(project=project, user__username="cid").user
    mild = ChainFactory(project=project, step_count=3)
    annotation_with_ratings(chain=mild, annotator=ann, labels=[1, 1, 1])
    annotation_with_ratings(chain=mild, annotator=bob, labels=[1, -1, 1])
    wild = ChainFactory(project=project, step_count=3)
    annotation_with_ratings(chain=wild, annotator=ann, labels=[1, 1, 1])
    annotation_with_ratings(chain=wild, annotator=cid, labels=[-1, 0, -1])
    page_login(page=page, base_url=live_server.url, username=lead.username)
    page.goto(f"{live_server.url}/projects/{project.pk}/review/")
    page.wait_for_selector("#review[data-state=ready]")
    items = page.locator("#rv-list .rv-item")
    expect(items).to_have_count(2)

    # When / Then: bob's chains only
    page.select_option("#rv-annotator", "bob")
    expect(items).to_have_count(1)
    expect(items.first).to_have_attribute("data-chain", str(mild.pk))
    # ...anyone's, agreeing on at most half their steps (two loads in a row: the newest wins)
    page.select_option("#rv-annotator", "")
    page.select_option("#rv-agreement", "0.5")
    expect(items.first).to_have_attribute("data-chain", str(wild.pk))
    expect(items).to_have_count(1)
    expect(page.locator("#review")).to_have_attribute("data-chain", str(wild.pk))
    page.screenshot(path=str(ARTIFACTS / "review-filters.png"), full_page=True)
