"""HTML pages: login, logout, "My projects", the project overview; access and escaping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from annotation.models import ImportBatch, Project, Role
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db

XSS = "<script>alert(1)</script>"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"


@pytest.fixture
def browser_for() -> Callable[[Any], Client]:
    def make(user: Any) -> Client:
        client = Client()
        if user is not None:
            client.force_login(user)
        return client

    return make


@pytest.fixture
def world(project: Project, make_member: Callable[..., Any]) -> dict[str, Any]:
    other = ProjectFactory(name="other team")
    return {
        "project": project,
        "other": other,
        "anonymous": None,
        "annotator": make_member(project, Role.ANNOTATOR),
        "lead": make_member(project, Role.LEAD),
        "ml": make_member(project, Role.ML),
        "outsider": make_member(other, Role.ANNOTATOR),
        "staff": UserFactory(is_staff=True),
        "superuser": UserFactory(is_staff=True, is_superuser=True),
    }


ROLES = ("anonymous", "annotator", "lead", "ml", "outsider", "staff", "superuser")
PAGE_ACCESS = {
    "home": (302, 200, 200, 200, 200, 200, 200),
    "overview": (302, 200, 200, 200, 404, 404, 200),
    # Who may create projects is the API's rule: staff (a superuser is staff too).
    "new": (302, 403, 403, 403, 403, 200, 200),
    "settings": (302, 403, 200, 403, 404, 404, 200),
    "members": (302, 403, 200, 403, 404, 404, 200),
}
PAGE_URLS = {
    "home": "/",
    "overview": "/projects/{id}/",
    "new": "/projects/new/",
    "settings": "/projects/{id}/settings/",
    "members": "/projects/{id}/members/",
}


@pytest.mark.parametrize(
    ("page", "who", "expected"),
    [
        (page, who, code)
        for page, codes in PAGE_ACCESS.items()
        for who, code in zip(ROLES, codes, strict=True)
    ],
)
def test_page_access(
    world: dict[str, Any], browser_for: Callable[[Any], Client], page: str, who: str, expected: int
) -> None:
    url = PAGE_URLS[page].format(id=world["project"].pk)
    response = browser_for(world[who]).get(url)
    assert response.status_code == expected
    if expected == 302:
        assert response["Location"] == f"/login/?next={url}"


def test_login_page_logs_in_and_returns_to_next(world: dict[str, Any]) -> None:
    client = Client()
    assert client.get("/login/").status_code == 200
    username = world["annotator"].username
    response = client.post(
        f"/login/?next=/projects/{world['project'].pk}/",
        {
            "username": username,
            "password": "pass-1234",
            "next": f"/projects/{world['project'].pk}/",
        },
    )
    assert response.status_code == 302
    assert response["Location"] == f"/projects/{world['project'].pk}/"
    assert client.get("/").status_code == 200


def test_wrong_password_stays_on_login(world: dict[str, Any]) -> None:
    response = Client().post("/login/", {"username": world["annotator"].username, "password": "x"})
    assert response.status_code == 200
    assert b"Please enter a correct username and password" in response.content


def test_logout_is_post_only(world: dict[str, Any], browser_for: Callable[[Any], Client]) -> None:
    client = browser_for(world["annotator"])
    assert client.get("/logout/").status_code == 405
    assert client.get("/").status_code == 200
    response = client.post("/logout/")
    assert response.status_code == 302 and response["Location"] == "/login/"
    assert client.get("/").status_code == 302


def test_home_lists_only_own_projects_with_progress(
    world: dict[str, Any], browser_for: Callable[[Any], Client]
) -> None:
    # Given the annotator's project with two chains, one finished, and a foreign project
    project: Project = world["project"]
    ChainFactory(project=project, finished_count=1, is_finished=True)
    ChainFactory(project=project)
    # When the annotator opens "My projects"
    response = browser_for(world["annotator"]).get("/")
    html = response.content.decode()
    # Then their project is there with its progress and a link to label, the other is not
    assert project.name in html
    assert world["other"].name not in html
    assert "1 of 2 annotations" in html
    assert f'href="/projects/{project.pk}/label/"' in html
    assert "annotator" in html


def test_home_without_projects_says_so(browser_for: Callable[[Any], Client]) -> None:
    response = browser_for(UserFactory()).get("/")
    assert b"not a member of any project" in response.content


def test_home_query_count_does_not_grow(
    browser_for: Callable[[Any], Client], django_assert_num_queries: Any
) -> None:
    user = UserFactory()
    for i in range(5):
        p = ProjectFactory(name=f"page {i}")
        MembershipFactory(project=p, user=user)
        ChainFactory(project=p)
    client = browser_for(user)
    # session, user, the annotated project list; on the day's first reading two more to
    # freeze the annotators' figures (one UPDATE, one read back)
    with django_assert_num_queries(5):
        assert client.get("/").status_code == 200
    with django_assert_num_queries(3):
        assert client.get("/").status_code == 200


def test_overview_shows_members_and_imports_only_to_leads(
    world: dict[str, Any], browser_for: Callable[[Any], Client]
) -> None:
    project: Project = world["project"]
    ImportBatch.objects.create(
        project=project, filename="batch-one.jsonl", format="generic", content_hash="h" * 64
    )
    lead_html = browser_for(world["lead"]).get(f"/projects/{project.pk}/").content.decode()
    annotator_html = (
        browser_for(world["annotator"]).get(f"/projects/{project.pk}/").content.decode()
    )
    for html in (lead_html, annotator_html):
        assert world["lead"].username in html and world["ml"].username in html
        assert world["outsider"].username not in html
    assert "batch-one.jsonl" in lead_html
    assert "batch-one.jsonl" not in annotator_html


def test_imported_and_user_text_is_escaped(
    make_member: Callable[..., Any], browser_for: Callable[[Any], Client]
) -> None:
    # Given a project whose name, guidelines, import file name and a member's name are markup
    project = ProjectFactory(name=f"Evil {XSS}", guidelines=f"Rule one\n{XSS}")
    lead = make_member(project, Role.LEAD)
    make_member(project, Role.ANNOTATOR, user__username=f"mallory{XSS}")
    ImportBatch.objects.create(
        project=project, filename=f"{XSS}.jsonl", format="generic", content_hash="x" * 64
    )
    client = browser_for(lead)
    # When the pages render them
    for url in ("/", f"/projects/{project.pk}/"):
        html = client.get(url).content.decode()
        # Then every one is text, never markup
        assert XSS not in html, url
        assert ESCAPED in html, url
    overview = client.get(f"/projects/{project.pk}/").content.decode()
    assert overview.count(ESCAPED) >= 5  # title, heading, guidelines, member, file name


def test_pages_use_no_inline_script_and_local_assets(
    world: dict[str, Any], browser_for: Callable[[Any], Client]
) -> None:
    import re

    html = browser_for(world["lead"]).get(f"/projects/{world['project'].pk}/").content.decode()
    assert "<script>" not in html  # scripts come from files only
    assets = re.findall(r'<(?:script|link)[^>]+(?:src|href)="([^"]+)"', html)
    assert assets and all(a.startswith("/static/") for a in assets)
