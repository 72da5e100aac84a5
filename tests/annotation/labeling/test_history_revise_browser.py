"""An annotator revises a submitted chain from their history in a real browser (Debian's
chromium against pytest-django's live server, under the site's Content-Security-Policy),
at 1366x768 and 390 px: reopen, `e`, the workspace's rating keys, a comment, Enter; the
revision replaces the pass in the list and the old pass stays, read-only, with the
reason. A snapshot then closes the revision, and the page says so. Screenshots go to
tests/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from annotation.datasets.snapshots import snapshot_create
from annotation.labeling.history import CLOSED_REPLACED, CLOSED_SNAPSHOT
from annotation.models import Annotation, LabelingMode, Role
from tests.browser import ARTIFACTS, chromium_running, page_login, page_overflow, page_watched
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory, annotation_with_ratings

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WIDTHS = {"1366": (1366, 768), "390": (390, 844)}


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


def _shot(page: Page, name: str, width: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}-{width}.png"), full_page=True)


def test_annotator_revises_a_submitted_chain_with_the_keyboard(
    live_server: Any, page: Page, width: str
) -> None:
    # Given: an annotator's pass over a 4-step chain, every step +1
    project = ProjectFactory(labeling_mode=LabelingMode.ALL_STEPS, name="Algebra, revisions")
    user = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    chain = ChainFactory(project=project, step_count=4)
    mine = annotation_with_ratings(chain=chain, annotator=user, labels=[1, 1, 1, 1])
    page_login(page=page, base_url=live_server.url, username=user.username)

    # When: they reopen it from the list, it is open to change
    page.goto(f"{live_server.url}/projects/{project.pk}/history/")
    page.locator(".hist-entry").first.click()
    root = page.locator("#history")
    expect(root).to_have_attribute("data-revisable", "yes")
    expect(page.locator("#hist-edit")).to_be_visible()
    expect(page.locator("#hist-closed")).to_be_hidden()

    # And: e, then step 1 +1, step 2 incorrect with a comment, the rest correct, Enter
    page.keyboard.press("e")
    expect(root).to_have_attribute("data-editing", "yes")
    page.keyboard.press("j")
    page.keyboard.press("3")  # step 2 incorrect; the cursor moves to step 3
    page.keyboard.press("k")
    page.keyboard.press("c")
    page.keyboard.type("The sign flips here.")
    page.keyboard.press("Enter")  # leaves the comment
    _shot(page, "history-revise-editing", width)
    assert page_overflow(page) == [], "the page scrolls sideways"
    page.keyboard.press("Enter")  # saves

    # Then: the revision replaced the pass; the page says so and shows it, still open
    expect(page.locator("#hist-message")).to_contain_text("Saved")
    expect(page.locator("#hist-chain-verb")).to_have_text("Revised")
    revision = Annotation.objects.get(supersedes=mine)
    expect(root).to_have_attribute("data-annotation", str(revision.pk))
    ratings = list(revision.ratings.order_by("step__index").values_list("rating", "comment"))
    assert ratings == [(1, ""), (-1, "The sign flips here."), (1, ""), (1, "")]
    expect(page.locator(".ws-step").nth(1)).to_have_attribute("data-rating", "-1")
    expect(page.locator(".ws-step").nth(1)).to_contain_text("The sign flips here.")
    expect(root).to_have_attribute("data-revisable", "yes")
    _shot(page, "history-revise-saved", width)

    # And: the old pass opens read-only and says why, with a link to the newest
    page.goto(f"{live_server.url}/projects/{project.pk}/history/#annotation-{mine.pk}")
    expect(page.locator("#hist-closed")).to_be_visible()
    expect(page.locator("#hist-closed-reason")).to_have_text(CLOSED_REPLACED)
    expect(page.locator("#hist-edit")).to_be_hidden()
    page.keyboard.press("e")
    expect(root).not_to_have_attribute("data-editing", "yes")

    # And: the list holds the chain once, marked revised
    page.goto(f"{live_server.url}/projects/{project.pk}/history/")
    expect(page.locator(".hist-list > li")).to_have_count(1)
    expect(page.locator(".hist-list .badge")).to_have_text("revised")

    # When: the lead takes a snapshot, the revision can no longer change, and says why
    snapshot_create(project=project, user=lead, finished_only=False)
    page.goto(f"{live_server.url}/projects/{project.pk}/history/#annotation-{revision.pk}")
    expect(page.locator("#hist-closed")).to_be_visible()
    expect(page.locator("#hist-closed-reason")).to_have_text(CLOSED_SNAPSHOT)
    expect(root).to_have_attribute("data-revisable", "no")
    expect(page.locator("#hist-mode")).to_have_text("read-only")
    assert page_overflow(page) == [], "the page scrolls sideways"
    _shot(page, "history-revise-closed", width)


def test_a_pass_closed_while_editing_is_not_saved_and_says_why(
    live_server: Any, page: Page, width: str
) -> None:
    # Given: an annotator editing a pass
    project = ProjectFactory(name="Closing under an editor")
    user = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    chain = ChainFactory(project=project, step_count=3)
    mine = annotation_with_ratings(chain=chain, annotator=user, labels=[1, 1, 1])
    page_login(page=page, base_url=live_server.url, username=user.username)
    page.goto(f"{live_server.url}/projects/{project.pk}/history/#annotation-{mine.pk}")
    page.locator("#hist-edit").click()
    page.locator(".ws-step").nth(2).locator(".rate-incorrect").click()

    # When: a snapshot is taken before they save
    snapshot_create(project=project, user=lead, finished_only=False)
    page.locator("#hist-save").click()

    # Then: nothing is written, the page says why and shows the pass as it stands
    expect(page.locator("#hist-message")).to_contain_text("Not saved")
    expect(page.locator("#hist-closed")).to_be_visible()
    expect(page.locator("#hist-closed-reason")).to_have_text(CLOSED_SNAPSHOT)
    expect(page.locator("#history")).to_have_attribute("data-revisable", "no")
    assert Annotation.objects.filter(chain=chain).count() == 1


def test_a_revision_asks_about_texts_on_re_rated_steps(
    live_server: Any, page: Page, width: str
) -> None:
    # Given: a pass with step 2 the first -1, a comment on it and a rewrite written for it
    project = ProjectFactory(labeling_mode=LabelingMode.ALL_STEPS)
    user = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    chain = ChainFactory(project=project, step_count=4)
    mine = annotation_with_ratings(chain=chain, annotator=user, labels=[1, -1, -1, 1])
    Annotation.objects.filter(pk=mine.pk).update(rewrite="So 12 + 6 = 18.")
    mine.ratings.filter(step__index=1).update(comment="Sue has 12 pink, not 18")
    page_login(page=page, base_url=live_server.url, username=user.username)
    page.goto(f"{live_server.url}/projects/{project.pk}/history/#annotation-{mine.pk}")
    root = page.locator("#history")
    expect(root).to_have_attribute("data-revisable", "yes")

    # When: they rate step 2 correct (step 3 becomes the first -1) and save
    page.keyboard.press("e")
    page.keyboard.press("j")
    page.keyboard.press("1")
    page.keyboard.press("Enter")

    # Then: before anything is saved, the page asks about the comment and the rewrite
    dialog = page.locator("#hist-texts-dialog")
    expect(dialog).to_be_visible()
    texts = dialog.locator(".hist-text")
    expect(texts).to_have_count(2)
    expect(texts.nth(0)).to_contain_text("Your comment on step 2")
    expect(texts.nth(1)).to_contain_text("Your rewrite of step 2")
    assert Annotation.objects.filter(chain=chain).count() == 1
    _shot(page, "history-revise-texts", width)
    assert page_overflow(page) == [], "the page scrolls sideways"

    # When: they go back to editing, nothing is saved; saving asks again
    dialog.get_by_role("button", name="Back to editing").click()
    expect(dialog).to_be_hidden()
    assert Annotation.objects.filter(chain=chain).count() == 1
    page.locator("#hist-save").click()
    expect(dialog).to_be_visible()

    # When: they delete the comment and keep the rewrite for step 3
    texts.nth(0).get_by_label("Delete it").check()
    texts.nth(1).get_by_label("Keep it for step 3, the first −1 now").check()
    dialog.get_by_role("button", name="Save revision").click()

    # Then: the revision holds each text where they said
    expect(page.locator("#hist-message")).to_contain_text("Saved")
    revision = Annotation.objects.get(supersedes=mine)
    rows = list(revision.ratings.order_by("step__index").values_list("rating", "comment"))
    assert rows == [(1, ""), (1, ""), (-1, ""), (1, "")]
    assert revision.rewrite == "So 12 + 6 = 18."
