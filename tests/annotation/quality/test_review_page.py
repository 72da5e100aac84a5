"""The review page `/projects/{id}/review/`: access (leads only: other members 403,
non-members 404, anonymous to the login page), page config as JSON data, no inline script."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client

from annotation.models import Project, Role
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def _client(user: Any) -> Client:
    cache.clear()
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.mark.parametrize(
    ("who", "expected"),
    [("lead", 200), ("annotator", 403), ("ml", 403), ("outsider", 404), ("anonymous", 302)],
)
def test_review_page_access(project: Project, make_member: Any, who: str, expected: int) -> None:
    user = {
        "lead": lambda: make_member(project, Role.LEAD),
        "annotator": lambda: make_member(project, Role.ANNOTATOR),
        "ml": lambda: make_member(project, Role.ML),
        "outsider": UserFactory,
        "anonymous": lambda: None,
    }[who]()
    response = _client(user).get(f"/projects/{project.pk}/review/")
    assert response.status_code == expected
    if expected == 302:
        assert response["Location"].startswith("/login/")


def test_review_page_carries_only_endpoints_and_no_inline_script(
    project: Project, make_member: Any
) -> None:
    lead = make_member(project, Role.LEAD)
    html = _client(lead).get(f"/projects/{project.pk}/review/").content.decode()

    config = json.loads(
        re.search(r'<script id="review-config" type="application/json">(.*?)</script>', html)[1]
    )
    assert config["api"] == {
        "disagreements": f"/api/v1/projects/{project.pk}/disagreements/",
        "chain": "/api/v1/chains/",
    }
    # Every <script> is either a file or JSON data: nothing inline runs.
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert "src=" in tag or 'type="application/json"' in tag, tag
    assert re.search(r"<[^>]+\son[a-z]+\s*=", html) is None  # no inline event handlers
    assert "vendor/katex/katex.min.js" in html


def test_superuser_counts_as_lead(project: Project) -> None:
    boss = UserFactory(is_staff=True, is_superuser=True)
    assert _client(boss).get(f"/projects/{project.pk}/review/").status_code == 200
