"""Guidelines are Markdown: one renderer (annotation/guidelines.py) for the workspace, the
project pages and the settings page's preview endpoint; raw HTML is shown as text and
script URLs are not links."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from annotation.api.project_serializers import GUIDELINES_PREVIEW_MAX_CHARS
from annotation.guidelines import guidelines_html
from annotation.models import Role
from tests.factories import MembershipFactory, ProjectFactory, UserFactory

GUIDELINES = """# Grading

Rate **every** step; stop at the *first* error.

- `+1` correct
- `0` ambiguous

| rating | when |
|---|---|
| -1 | wrong |

<script>window.__xss = 1</script> [click](javascript:alert(1)) [docs](https://example.org/)
"""


def test_markdown_becomes_html_and_markup_stays_text() -> None:
    html = guidelines_html(text=GUIDELINES)
    assert "<h1>Grading</h1>" in html
    assert "<strong>every</strong>" in html and "<em>first</em>" in html
    assert "<li><code>+1</code> correct</li>" in html
    assert "<table>" in html and "<td>wrong</td>" in html
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "javascript:" not in html.replace("[click](javascript:alert(1))", "")
    assert 'href="javascript' not in html
    assert '<a href="https://example.org/">docs</a>' in html


def test_math_leaves_markdown_as_escaped_text_for_katex() -> None:
    # Given: math Markdown would mangle (backslash escapes, emphasis, a tag) and a price
    text = (
        "Say $\\{1, 2\\}$ and $a*b*c$, or \\(x_1 < y\\); it costs $5 and $10.\n\n"
        "$$\n\\sum_k k <script>\n$$"
    )
    html = guidelines_html(text=text)
    # Then: each formula is its source, escaped, in a box the pages typeset; the price
    # is text; nothing became markup
    assert '<span class="math-tex">\\{1, 2\\}</span>' in html
    assert '<span class="math-tex">a*b*c</span>' in html
    assert '<span class="math-tex">x_1 &lt; y</span>' in html
    assert "it costs $5 and $10." in html
    assert '<div class="math-tex math-display">\\sum_k k &lt;script&gt;</div>' in html
    assert "<em>" not in html and "<script>" not in html


def test_empty_guidelines_render_as_nothing() -> None:
    assert guidelines_html(text="") == ""


@pytest.mark.django_db
def test_preview_answers_what_the_pages_show(client_for: Callable[..., APIClient]) -> None:
    response = client_for(UserFactory()).post(
        "/api/v1/guidelines/preview/", {"guidelines": GUIDELINES}, format="json"
    )
    assert response.status_code == 200
    assert response.json() == {"html": str(guidelines_html(text=GUIDELINES))}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "guidelines"),
        ({"guidelines": None}, "guidelines"),
        ({"guidelines": "x" * (GUIDELINES_PREVIEW_MAX_CHARS + 1)}, "guidelines"),
        ({"guidelines": "ok", "overlap": 2}, "overlap"),
    ],
)
def test_preview_rejects_bad_input(
    client_for: Callable[..., APIClient], payload: dict[str, Any], field: str
) -> None:
    response = client_for(UserFactory()).post("/api/v1/guidelines/preview/", payload, format="json")
    assert response.status_code == 400
    assert field in response.json()


@pytest.mark.django_db
def test_preview_needs_a_signed_in_user(api_client: APIClient) -> None:
    response = api_client.post("/api/v1/guidelines/preview/", {"guidelines": "x"}, format="json")
    assert response.status_code == 401


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["", "label/"])
def test_workspace_and_project_pages_render_the_markdown(path: str) -> None:
    # Given a project whose guidelines are Markdown with markup in them
    project = ProjectFactory(guidelines=GUIDELINES)
    annotator = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    MembershipFactory(project=project, role=Role.LEAD)
    client = Client()
    client.force_login(annotator)
    # When an annotator opens the page
    html = client.get(f"/projects/{project.pk}/{path}").content.decode()
    # Then it holds the renderer's HTML, and the markup only as text
    assert str(guidelines_html(text=GUIDELINES)) in html
    assert "<script>window.__xss" not in html
