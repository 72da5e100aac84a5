"""Guidelines are Markdown: one renderer (annotation/guidelines.py) for the workspace, the
project pages and the settings page's preview endpoint; raw HTML is shown as text and
script URLs are not links."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from rest_framework.test import APIClient

from annotation.guidelines import GUIDELINES_MAX_CHARS, guidelines_html
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
        ({"guidelines": "x" * (GUIDELINES_MAX_CHARS + 1)}, "guidelines"),
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


# ------------------------------------------------------------------ size and time bounds

# 50,000 characters (half the size bound) that markdown-it takes seconds to render: each
# unclosed bracket scans the whole paragraph after it.
SLOW = "[" * 1000 + "a\n" * 24_500


@pytest.mark.django_db
def test_guidelines_that_render_too_slowly_are_refused_in_about_the_time_bound(
    client_for: Callable[..., APIClient],
) -> None:
    from annotation.guidelines import RENDER_CPU_SECONDS, too_slow_message

    assert len(SLOW) < GUIDELINES_MAX_CHARS
    # Given: a lead, and guidelines within the size bound that take seconds to render
    project = ProjectFactory(guidelines="Old.")
    lead = client_for(MembershipFactory(project=project, role=Role.LEAD).user)
    # When: they are previewed, and saved
    started = _cpu_seconds()
    preview = lead.post("/api/v1/guidelines/preview/", {"guidelines": SLOW}, format="json")
    preview_cpu = _cpu_seconds() - started
    saved = lead.patch(f"/api/v1/projects/{project.pk}/", {"guidelines": SLOW}, format="json")
    # Then: both are a 400 naming the bound, after no more CPU than it; nothing was saved
    assert (preview.status_code, saved.status_code) == (400, 400)
    assert preview.json() == saved.json() == {"guidelines": [too_slow_message()]}
    assert preview_cpu < RENDER_CPU_SECONDS + 0.6
    project.refresh_from_db()
    assert project.guidelines == "Old."


@pytest.mark.django_db
def test_guidelines_over_the_size_bound_are_refused_on_save(
    client_for: Callable[..., APIClient],
) -> None:
    project = ProjectFactory()
    lead = client_for(MembershipFactory(project=project, role=Role.LEAD).user)
    too_long = "x" * (GUIDELINES_MAX_CHARS + 1)
    saved = lead.patch(f"/api/v1/projects/{project.pk}/", {"guidelines": too_long}, format="json")
    assert saved.status_code == 400
    assert saved.json() == {
        "guidelines": [f"Ensure this field has no more than {GUIDELINES_MAX_CHARS} characters."]
    }


@pytest.mark.django_db
def test_saved_guidelines_are_rendered_once_and_pages_serve_the_stored_html(
    client_for: Callable[..., APIClient],
) -> None:
    from annotation.models import Project

    # Given: a lead saves Markdown guidelines
    project = ProjectFactory()
    lead_user = MembershipFactory(project=project, role=Role.LEAD).user
    response = client_for(lead_user).patch(
        f"/api/v1/projects/{project.pk}/", {"guidelines": GUIDELINES}, format="json"
    )
    assert response.status_code == 200, response.content
    # Then: their rendering is stored with them
    project.refresh_from_db()
    assert project.guidelines_html == str(guidelines_html(text=GUIDELINES))
    # When: the stored HTML is marked, and the workspace and project pages are opened
    Project.objects.filter(pk=project.pk).update(guidelines_html="<p>stored once</p>")
    browser = Client()
    browser.force_login(lead_user)
    # Then: they show the stored HTML, not a new rendering
    for path in ("", "label/"):
        page = browser.get(f"/projects/{project.pk}/{path}").content.decode()
        assert "<p>stored once</p>" in page and "<h1>Grading</h1>" not in page, path


# Block constructs cost CPU too, per row and per marker, where the parser reads few inline
# positions: 100,000 characters of a table of empty cells took 1.5 s of CPU in process and
# answered 200 with 1 MB (markdown-it-py 4, on the 2-core development machine, 2026-12);
# lines of nested list markers 1.1 to 1.6 s.
EMPTY_CELLS = ("|a|b|c|d|\n|-|-|-|-|\n" + "||||\n" * 20_000)[:100_000]
NESTED_LISTS = (("- " * 20 + "x\n") * 2400)[:100_000]
# What a lead writes: 100,000 characters of ordinary Markdown (bench/bench_attacks.py's).
LEGIT = ("Rate **each** step; see [the rules](https://example.org/) and $a^2$.\n\n" * 1500)[
    :100_000
]


def _cpu_seconds() -> float:
    import resource

    own, children = (
        resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.mark.django_db
@pytest.mark.parametrize(
    "text", [EMPTY_CELLS, NESTED_LISTS, SLOW], ids=["table", "nested lists", "slow brackets"]
)
def test_any_markdown_costs_at_most_the_cpu_bound_and_then_is_refused(
    client_for: Callable[..., APIClient], text: str
) -> None:
    from annotation.guidelines import RENDER_CPU_SECONDS, too_slow_message

    # Given: an annotator, and 100,000 characters whose blocks or brackets take seconds
    annotator = client_for(MembershipFactory(role=Role.ANNOTATOR).user)
    # When: they are previewed
    before = _cpu_seconds()
    answer = annotator.post("/api/v1/guidelines/preview/", {"guidelines": text}, format="json")
    spent = _cpu_seconds() - before
    # Then: a 400 naming the bound, after no more CPU than the bound (and a process's start)
    assert answer.status_code == 400
    assert answer.json() == {"guidelines": [too_slow_message()]}
    assert spent < RENDER_CPU_SECONDS + 0.6


def test_long_ordinary_guidelines_render_however_slow_the_wall_clock_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import itertools
    import types

    import annotation.guidelines as guidelines

    # Given: a machine so busy that every clock read finds ten more seconds gone
    ticks = itertools.count(step=10.0)
    busy = types.SimpleNamespace(monotonic=lambda: next(ticks))
    monkeypatch.setattr(guidelines, "time", busy, raising=False)
    # When: a lead's 100,000 characters of ordinary Markdown are rendered
    html = guidelines_html(text=LEGIT)
    # Then: they render (the bound is CPU, not the wall clock)
    assert html.count("<strong>each</strong>") == 1429


@pytest.mark.django_db
def test_the_preview_is_rate_limited_per_user(
    client_for: Callable[..., APIClient], settings: Any
) -> None:
    # Given: a rate of three previews a minute
    settings.STEPLAB_GUIDELINES_PREVIEW_RATE = "3/min"
    annotator, lead = client_for(UserFactory()), client_for(UserFactory())
    body = {"guidelines": "Rate **each** step."}
    # When: one user previews five times in a row
    codes = [
        annotator.post("/api/v1/guidelines/preview/", body, format="json").status_code
        for _ in range(5)
    ]
    # Then: the fourth and fifth wait, told for how long; another user is not held
    assert codes == [200, 200, 200, 429, 429]
    held = annotator.post("/api/v1/guidelines/preview/", body, format="json")
    assert int(held["Retry-After"]) > 0
    assert lead.post("/api/v1/guidelines/preview/", body, format="json").status_code == 200


@pytest.mark.django_db
def test_a_preview_while_this_process_renders_enough_is_told_to_come_back(
    client_for: Callable[..., APIClient],
) -> None:
    import annotation.guidelines as guidelines

    # Given: as many renderings running in this process as it runs at once
    held = [
        guidelines._RENDERING.acquire(blocking=False) for _ in range(guidelines.RENDERS_AT_ONCE)
    ]
    assert all(held)
    try:
        # When: one more preview comes
        answer = client_for(UserFactory()).post(
            "/api/v1/guidelines/preview/", {"guidelines": "Rate."}, format="json"
        )
    finally:
        for _ in held:
            guidelines._RENDERING.release()
    # Then: it holds no request thread waiting: a 429 that says when to come back
    assert answer.status_code == 429 and int(answer["Retry-After"]) >= 1
