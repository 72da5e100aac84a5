"""Navigation by role (invariant 6): the project page links every project page the
caller's role may open and no other; each linked page opens (200) and each other one is
"Not allowed" (403); and each page's own API answers the same role the same way, so a
page never opens onto an API that refuses it, nor refuses a role its API serves."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from annotation.models import Role
from annotation.navigation import page_roles, project_page_names
from tests.factories import MembershipFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db

# What each role finds on its project page, in order (the table of annotation.navigation).
EXPECTED = {
    Role.ANNOTATOR: ["Label", "Your history"],
    Role.ML: ["Label", "Your history", "Models"],
    Role.LEAD: [
        "Label",
        "Your history",
        "Review disagreements",
        "Chains",
        "Import chains",
        "Snapshots",
        "Models",
        "Settings",
        "Members",
        "Webhooks",
    ],
}

# The call each page makes to do its work: (method, URL name, body).
PAGE_API = {
    "label-workspace": ("post", "assignment-next", None),
    "history-page": ("get", "api-project-history", None),
    "review-page": ("get", "api-project-disagreements", None),
    "chains-page": ("get", "api-project-chains", None),
    "import-page": ("post", "api-project-imports", {}),
    "snapshots-page": ("get", "api-project-snapshot-diff", None),
    "project-models": ("get", "api-training-runs", None),
    "project-settings": ("patch", "api-project", {}),
    "project-members": ("post", "api-project-members", {}),
    "webhooks-page": ("get", "api-project-webhooks", None),
}


@pytest.fixture
def members() -> dict[str, Any]:
    project = ProjectFactory()
    people = {role: MembershipFactory(project=project, role=role).user for role in EXPECTED}
    people["superuser"] = UserFactory(is_staff=True, is_superuser=True)
    return {"project": project, **people}


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _links(html: str) -> list[tuple[str, str]]:
    nav = re.search(r'<nav class="actions project-pages".*?</nav>', html, re.S)
    assert nav, "the project page has no list of its pages"
    return [
        (label, href)
        for href, label in re.findall(r'<a class="button[^"]*" href="([^"]+)">([^<]+)</a>', nav[0])
    ]


def test_every_page_has_a_known_api_call() -> None:
    assert sorted(project_page_names()) == sorted(PAGE_API)


@pytest.mark.parametrize("who", [Role.ANNOTATOR, Role.ML, Role.LEAD, "superuser"])
def test_the_project_page_links_what_the_role_opens_and_nothing_else(
    members: dict[str, Any], who: str
) -> None:
    project = members["project"]
    role = Role.LEAD if who == "superuser" else who  # a superuser leads every project
    client = _client(members[who])
    response = client.get(reverse("project-overview", args=[project.pk]))
    assert response.status_code == 200
    links = _links(response.content.decode())
    assert [label for label, _ in links] == EXPECTED[role]
    linked = {href for _, href in links}
    for name in project_page_names():
        href = reverse(name, args=[project.pk])
        page = client.get(href)
        allowed = role in page_roles(name)
        assert (href in linked) == allowed, f"{name}: linked {href in linked}, may open {allowed}"
        assert page.status_code == (200 if allowed else 403), (name, page.status_code)


@pytest.mark.parametrize("role", list(EXPECTED))
def test_each_page_s_api_answers_its_role_as_the_page_does(
    members: dict[str, Any], role: str
) -> None:
    project = members["project"]
    client = _client(members[role])
    for name, (method, api, body) in PAGE_API.items():
        call = getattr(client, method)
        url = reverse(api, args=[project.pk])
        response = call(url) if body is None else call(url, body, content_type="application/json")
        if role in page_roles(name):
            assert response.status_code not in (403, 404), (name, api, response.status_code)
        else:
            assert response.status_code == 403, (name, api, response.status_code)
