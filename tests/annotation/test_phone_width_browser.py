"""The lead's pages on a 390 px phone screen (Debian's chromium, Playwright): the
dashboard and the review page fit the width, nothing scrolls sideways but wide tables
inside their own boxes, and the screenshots are written for a person to look at."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from annotation.models import Role
from tests.browser import ARTIFACTS, chromium_running, page_login, page_overflow, page_watched
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory, annotation_with_ratings

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WIDTH = 390


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=WIDTH, height=844, csp_errors=True) as opened:
        yield opened


@pytest.fixture
def disputed_project() -> Any:
    project = ProjectFactory(overlap=2, name="A project with a rather long name, as labs write")
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    ann = MembershipFactory(project=project, user__username="annotator-with-a-long-name").user
    bob = MembershipFactory(project=project, user__username="bob").user
    for n in range(3):
        chain = ChainFactory(project=project, step_count=4)
        annotation_with_ratings(chain=chain, annotator=ann, labels=[1, 1, -1, 1])
        annotation_with_ratings(chain=chain, annotator=bob, labels=[1, -1 if n else 1, 1, 1])
    project.lead = lead  # type: ignore[attr-defined]
    return project


@pytest.mark.parametrize(("name", "path", "ready"), [
    ("dashboard", "", "#dashboard[data-state=ready]"),
    ("review", "review/", "#review[data-state=ready]"),
])  # fmt: skip
def test_the_lead_s_pages_fit_a_phone(
    live_server: Any, page: Page, disputed_project: Any, name: str, path: str, ready: str
) -> None:
    page_login(page=page, base_url=live_server.url, username=disputed_project.lead.username)
    page.goto(f"{live_server.url}/projects/{disputed_project.pk}/{path}")
    page.wait_for_selector(ready)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}-390.png"), full_page=True)
    assert page_overflow(page, WIDTH) == []
