"""A lead runs a project from the browser (Debian's chromium driven by Playwright against
pytest-django's live server, under the site's Content-Security-Policy), at a laptop's
1366x768 and a phone's 390 px: creates a project with Markdown guidelines (previewed as
the workspace shows them), edits its settings (a validation error shown beside its field,
nothing saved), adds two members, changes a role and removes a member. Screenshots of
every page at both widths go to tests/artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from annotation.models import LabelingMode, Membership, Project, Role
from tests.browser import (
    ARTIFACTS,
    chromium_running,
    page_login,
    page_overflow,
    page_watched,
    workspace_open,
)
from tests.factories import MembershipFactory, ProjectFactory, UserFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

WIDTHS = {"1366": (1366, 768), "390": (390, 844)}
GUIDELINES = (
    "# Grading\n\nRate **every** step.\n\n- `+1` correct\n- `-1` wrong\n\n"
    '<img src=x onerror="window.__xss=1"> [x](javascript:window.__xss=1)'
)


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


def _no_sideways_scroll(page: Page) -> None:
    assert page_overflow(page) == [], "the page scrolls sideways"


def test_staff_creates_a_project_with_previewed_guidelines(
    live_server: Any, page: Page, width: str
) -> None:
    # Given: a staff user who belongs to no project yet
    staff = UserFactory(username=f"staff{width}", is_staff=True)
    page_login(page=page, base_url=live_server.url, username=staff.username)

    # When: they press "New project" on the home page and fill in the form
    _no_sideways_scroll(page)
    _shot(page, "home_new_project", width)
    page.get_by_role("link", name="New project").first.click()
    page.wait_for_url(f"{live_server.url}/projects/new/")
    page.wait_for_selector("#project-settings[data-state=ready]")
    name = f"Algebra chains {width}"
    page.fill("#f-name", name)
    page.select_option("#f-labeling_mode", LabelingMode.FIRST_ERROR)
    page.fill("#f-overlap", "2")
    page.fill("#f-guidelines", GUIDELINES)
    page.get_by_role("tab", name="Preview").click()

    # Then: the preview is the workspace's rendering; markup in it is text
    preview = page.locator("#guidelines-preview")
    expect(preview.locator("h1")).to_have_text("Grading")
    expect(preview.locator("strong")).to_have_text("every")
    assert preview.locator("li").count() == 2
    assert preview.locator("img").count() == 0
    assert preview.locator("a").count() == 0  # a javascript: URL is no link
    assert '<img src=x onerror="window.__xss=1">' in preview.inner_text()
    assert page.evaluate("() => typeof window.__xss") == "undefined"
    assert page.locator("#f-guidelines").is_hidden()
    _no_sideways_scroll(page)
    _shot(page, "project_new", width)

    # When: they create it
    page.get_by_role("button", name="Create project").click()

    # Then: the project exists with those settings, they lead it, and they land on its
    # members page
    page.wait_for_url("**/members/?created=1")
    project = Project.objects.get(name=name)
    assert (project.overlap, project.labeling_mode) == (2, LabelingMode.FIRST_ERROR)
    assert project.guidelines == GUIDELINES
    assert Membership.objects.get(project=project).user == staff
    assert Membership.objects.get(project=project).role == Role.LEAD
    expect(page.locator("#created-message")).to_be_visible()
    expect(page.locator("#members tbody tr")).to_have_count(1)

    # A name that is taken is refused beside the field, and nothing is created
    page.goto(f"{live_server.url}/projects/new/")
    page.wait_for_selector("#project-settings[data-state=ready]")
    page.fill("#f-name", name)
    page.get_by_role("button", name="Create project").click()
    expect(page.locator("#e-name")).to_contain_text("already exists")
    assert page.locator("#f-name").get_attribute("aria-invalid") == "true"
    assert Project.objects.filter(name=name).count() == 1


def test_lead_edits_settings_with_a_validation_error_first(
    live_server: Any, page: Page, width: str
) -> None:
    # Given: a lead of a project with overlap 1
    project = ProjectFactory(name=f"Geometry {width}", guidelines="Old rules.")
    lead = MembershipFactory(project=project, role=Role.LEAD, user__username=f"lead{width}").user
    page_login(page=page, base_url=live_server.url, username=lead.username)

    # When: they open Settings from the dashboard
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.get_by_role("link", name="Settings").click()
    page.wait_for_selector("#project-settings[data-state=ready]")
    assert page.locator("#f-guidelines").input_value() == "Old rules."
    assert page.locator("#f-overlap").input_value() == "1"

    # ...and save an overlap of 0 together with a valid gold rate
    page.fill("#f-overlap", "0")
    page.fill("#f-gold_rate", "0.2")
    page.check("#f-leads_rule_own_labels")
    page.get_by_role("button", name="Save settings").click()

    # Then: the error is beside the overlap field and nothing was saved
    expect(page.locator("#e-overlap")).to_have_text(
        "Ensure this value is greater than or equal to 1."
    )
    assert page.locator("#e-gold_rate").is_hidden()
    expect(page.locator("#form-message")).to_contain_text("Nothing was saved")
    project.refresh_from_db()
    assert (project.overlap, project.gold_rate, project.leads_rule_own_labels) == (1, 0.0, False)
    page.locator("#e-overlap").scroll_into_view_if_needed()
    _no_sideways_scroll(page)
    _shot(page, "project_settings_error", width)

    # When: they fix it, change the rest (the name too) and save again
    page.fill("#f-name", f"Geometry {width}, round 2")
    page.fill("#f-overlap", "3")
    page.get_by_label("Count each imported label as one more vote").check()
    page.fill("#f-lease_minutes", "45")
    page.fill("#f-screening_chains", "5")
    page.fill("#f-screening_pass_accuracy", "0.9")
    page.fill("#f-guidelines", "Rate **each** step.")
    page.get_by_role("tab", name="Preview").click()
    expect(page.locator("#guidelines-preview strong")).to_have_text("each")
    page.get_by_role("button", name="Save settings").click()

    # Then: every change is saved through the API, and the error is gone
    expect(page.locator("#form-message")).to_contain_text("Saved")
    assert page.locator("#e-overlap").is_hidden()
    project.refresh_from_db()
    assert project.overlap == 3 and project.gold_rate == 0.2
    assert project.leads_rule_own_labels is True and project.import_labels == "vote"
    assert (project.lease_minutes, project.screening_chains) == (45, 5)
    assert project.screening_pass_accuracy == 0.9
    assert project.guidelines == "Rate **each** step."
    assert project.name == f"Geometry {width}, round 2"
    expect(page.locator("#settings-title")).to_have_text(f"Settings · Geometry {width}, round 2")
    _shot(page, "project_settings", width)

    # And the dashboard and the workspace show the guidelines as the preview did
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    expect(page.locator(".guidelines strong")).to_have_text("each")
    workspace_open(page=page, base_url=live_server.url, project_id=project.pk)
    page.keyboard.press("g")
    expect(page.locator("#guidelines-dialog .guidelines strong")).to_have_text("each")
    _shot(page, "workspace_guidelines", width)


def test_lead_adds_two_members_changes_a_role_and_removes_one(
    live_server: Any, page: Page, width: str
) -> None:
    # Given: a lead alone in their project, and two users who are not in it
    project = ProjectFactory(name=f"Number theory {width}")
    lead = MembershipFactory(project=project, role=Role.LEAD, user__username=f"ld{width}").user
    ann = UserFactory(username=f"ann{width}")
    bob = UserFactory(username=f"bob-with-a-long-username-{width}")
    page_login(page=page, base_url=live_server.url, username=lead.username)
    page.goto(f"{live_server.url}/projects/{project.pk}/")
    page.get_by_role("link", name="Members", exact=True).first.click()
    page.wait_for_selector("#project-members[data-state=ready]")
    expect(page.locator("#members tbody tr")).to_have_count(1)

    # When: they add a name nobody has
    page.fill("#f-username", "nobody-here")
    page.get_by_role("button", name="Add").click()
    # Then: the field says so, and nobody is added
    expect(page.locator("#e-username")).to_contain_text("No active user named 'nobody-here'")
    assert Membership.objects.filter(project=project).count() == 1

    # When: they add ann as an annotator and bob as ML staff
    page.fill("#f-username", ann.username)
    page.select_option("#f-role", Role.ANNOTATOR)
    page.get_by_role("button", name="Add").click()
    expect(page.locator("#members-message")).to_contain_text(f"{ann.username} was added")
    assert page.locator("#e-username").is_hidden()
    page.fill("#f-username", bob.username)
    page.select_option("#f-role", Role.ML)
    page.get_by_role("button", name="Add").click()
    expect(page.locator("#members-message")).to_contain_text(f"{bob.username} was added")

    # Then: both are members with those roles, and listed
    expect(page.locator("#members tbody tr")).to_have_count(3)
    roles = dict(Membership.objects.filter(project=project).values_list("user__username", "role"))
    assert roles == {lead.username: Role.LEAD, ann.username: Role.ANNOTATOR, bob.username: Role.ML}
    _no_sideways_scroll(page)
    _shot(page, "project_members", width)

    # When: they make ann a lead
    page.get_by_label(f"Role of {ann.username}").select_option(Role.LEAD)
    # Then
    expect(page.locator("#members-message")).to_contain_text(f"{ann.username} is now Project lead")
    assert Membership.objects.get(project=project, user=ann).role == Role.LEAD

    # When: they make bob an annotator, then try to leave the leads' ranks... with ann as
    # the only other lead demoted first, the rule that a project keeps a lead speaks
    page.get_by_label(f"Role of {bob.username}").select_option(Role.ANNOTATOR)
    expect(page.locator("#members-message")).to_contain_text(f"{bob.username} is now Annotator")
    page.get_by_label(f"Role of {ann.username}").select_option(Role.ANNOTATOR)
    expect(page.locator("#members-message")).to_contain_text(f"{ann.username} is now Annotator")
    page.get_by_label(f"Role of {lead.username}").select_option(Role.ML)
    expect(page.locator("#members-message")).to_contain_text(
        "This is the project's only lead; add another lead first."
    )
    # ...beside the member too, and the select shows the role that stayed
    expect(page.locator(f"#members tr[data-user='{lead.pk}'] .member-error")).to_have_text(
        "This is the project's only lead; add another lead first."
    )
    expect(page.get_by_label(f"Role of {lead.username}")).to_have_value(Role.LEAD)
    assert Membership.objects.get(project=project, user=lead).role == Role.LEAD
    page.locator("#members-message").scroll_into_view_if_needed()
    _shot(page, "project_members_last_lead", width)

    # When: they remove bob, confirming the question
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name=f"Remove {bob.username}").click()
    # Then
    expect(page.locator("#members-message")).to_contain_text(f"{bob.username} was removed")
    expect(page.locator("#members tbody tr")).to_have_count(2)
    assert not Membership.objects.filter(project=project, user=bob).exists()

    # When: they try to remove themselves, the only lead
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name=f"Remove {lead.username}").click()
    expect(page.locator("#members-message")).to_contain_text("only lead")
    assert Membership.objects.filter(project=project, user=lead).exists()
    _shot(page, "project_members_after", width)


def test_annotators_see_no_new_project_button_nor_lead_pages(
    live_server: Any, page: Page, width: str
) -> None:
    project = ProjectFactory()
    annotator = MembershipFactory(project=project, user__username=f"plain{width}").user
    page_login(page=page, base_url=live_server.url, username=annotator.username)
    assert page.get_by_role("link", name="New project").count() == 0
    response = page.goto(f"{live_server.url}/projects/{project.pk}/settings/")
    assert response is not None and response.status == 403
    response = page.goto(f"{live_server.url}/projects/new/")
    assert response is not None and response.status == 403
    expect(page.locator("main")).to_contain_text("Only staff users can create projects.")
