"""The pages' one error formatter (``errorText`` in static/js/steplab.js), run in Chromium
on the shapes DRF answers with: a field's list, a list of per-item objects (a submit's
per-rating errors, which the workspace's old formatter dropped), a dict keyed by index, a
bare ``detail``, and a network error with no body."""

from __future__ import annotations

import os
from typing import Any

import pytest
from playwright.sync_api import Browser

from tests.browser import page_watched

pytestmark = pytest.mark.skipif(
    not os.path.exists("/usr/bin/chromium") and not os.environ.get("STEPLAB_CHROMIUM"),
    reason="Debian's chromium package is not installed (make test installs it)",
)

CASES: list[tuple[Any, dict[str, bool], str]] = [
    ({"name": ["This field is required."]}, {}, "name: This field is required."),
    (
        {"ratings": [{}, {"rating": ['"5" is not a valid choice.']}]},
        {},
        'ratings[1].rating: "5" is not a valid choice.',
    ),
    ({"steps": {"3": ["Too long."]}}, {}, "steps[3]: Too long."),
    ({"detail": "Not allowed."}, {}, "Not allowed."),
    (
        {"role": ["Not a role."], "non_field_errors": ["Last lead."]},
        {"fields": False},
        "Not a role. Last lead.",
    ),
]


@pytest.mark.django_db
def test_error_text_keeps_nested_errors_with_where_they_are(
    browser: Browser, live_server: Any
) -> None:
    with page_watched(browser=browser, width=1366, height=768) as page:
        page.goto(f"{live_server.url}/login/")
        texts = page.evaluate(
            """async (cases) => {
              const { errorText } = await import("/static/js/steplab.js");
              const out = cases.map(([body, options]) => errorText({ body }, options));
              out.push(errorText(new TypeError("Failed to fetch")));
              return out;
            }""",
            [[body, options] for body, options, _ in CASES],
        )
    assert texts == [expected for _, _, expected in CASES] + ["Failed to fetch"]
