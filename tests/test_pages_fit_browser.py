"""Every page fits a laptop (1366x768) and a phone (390x844): nothing scrolls the page
sideways, nothing is cut off or hidden in a box that scrolls sideways (only a formula or
code may scroll inside its own box), on a lab as a real one looks after a week
(tests/pages_lab.py: long names, long steps, wide display math, a long unbroken token,
four voters). Debian's chromium through Playwright, under the site's Content-Security-
Policy; a screenshot of each page at each width goes to tests/artifacts/fit-*.png.

The phone workspace's controls are at least 44 px in both directions (a thumb), and the
guidelines' math is typeset wherever the guidelines are shown."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from tests.browser import (
    ARTIFACTS,
    chromium_running,
    page_clipped_sideways,
    page_overflow,
    page_signed_in,
    page_watched,
)
from tests.pages_lab import Lab, lab_build

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

LAPTOP = (1366, 768)
READY_LABEL = "#workspace[data-state=ready]"
PHONE = (390, 844)

# name, who (a Lab attribute, None: signed out), path, what shows the page is ready
PAGES = [
    ("login", None, "/login/", "form.stacked-form"),
    ("invite", None, "/invite/", "#invite-open"),
    ("password", "annotator", "/password/", "form"),
    ("tokens", "annotator", "/tokens/", "#tokens[data-state=ready]"),
    ("home", "lead", "/", ".project-list"),
    ("project-new", "lead", "/projects/new/", "#project-settings[data-state=ready]"),
    ("dashboard", "lead", "/projects/{project}/", "#dashboard[data-state=ready]"),
    ("overview-annotator", "annotator", "/projects/{project}/", ".project-pages"),
    ("overview-ml", "ml", "/projects/{project}/", ".project-pages"),
    ("settings", "lead", "/projects/{project}/settings/", "#project-settings[data-state=ready]"),
    ("members", "lead", "/projects/{project}/members/", "#project-members[data-state=ready]"),
    ("import", "lead", "/projects/{project}/import/", "#import[data-state=idle]"),
    ("snapshots", "lead", "/projects/{project}/snapshots/", "#snapshots[data-state=ready]"),
    ("chains", "lead", "/projects/{project}/chains/", "#chains[data-state=ready]"),
    ("chain", "lead", "/projects/{project}/chains/{chain}/", "#chain[data-state=ready]"),
    ("review", "lead", "/projects/{project}/review/#chain={chain}", "#review[data-state=ready]"),
    ("label", "annotator", "/projects/{project}/label/", READY_LABEL),
    ("history", "annotator", "/projects/{project}/history/", "#history[data-state=list]"),
    (
        "history-chain",
        "annotator",
        "/projects/{project}/history/#annotation-{annotation}",
        "#history[data-state=chain]",
    ),
    ("models", "ml", "/projects/{project}/models/", "#versions-table tbody tr td + td"),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with chromium_running() as launched:
        yield launched


@pytest.fixture
def lab() -> Lab:
    return lab_build()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    with page_watched(browser=browser, width=LAPTOP[0], height=LAPTOP[1], csp_errors=True) as p:
        yield p


def _open(page: Page, live_server: Any, lab: Lab, who: str | None, path: str, ready: str) -> None:
    if who is not None and not page.context.cookies():
        page_signed_in(page=page, base_url=live_server.url, user=getattr(lab, who))
    page.set_viewport_size({"width": LAPTOP[0], "height": LAPTOP[1]})
    page.goto(live_server.url + path.format(**lab.ids()))
    page.wait_for_selector(ready, state="attached", timeout=30_000)  # a loaded machine


def _measure(page: Page, name: str, size: tuple[int, int]) -> dict[str, list[str]]:
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.wait_for_timeout(50)  # media and container queries settle in the next frame
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"fit-{name}-{size[0]}.png"), full_page=True)
    return {"scrolls the page": page_overflow(page), "cut off": page_clipped_sideways(page)}


@pytest.mark.parametrize("who", ["lead", "annotator", "ml", None], ids=str)
def test_every_page_fits_a_laptop_and_a_phone(
    live_server: Any, page: Page, lab: Lab, who: str | None
) -> None:
    # One lab and one signed-in browser per role, each of its pages at both widths: the
    # misfits of every page at once.
    misfits: dict[str, dict[str, list[str]]] = {}
    for name, whose, path, ready in PAGES:
        if whose != who:
            continue
        _open(page, live_server, lab, who, path, ready)
        for size in (LAPTOP, PHONE):
            found = _measure(page, name, size)
            for what, elements in found.items():
                if elements:
                    misfits[f"{name} at {size[0]} px {what}"] = elements
    assert misfits == {}


def test_the_phone_workspace_gives_a_thumb_44_px_and_the_step_its_width(
    live_server: Any, browser: Browser, lab: Lab
) -> None:
    with page_watched(browser=browser, width=PHONE[0], height=PHONE[1], csp_errors=True) as page:
        _open(page, live_server, lab, "annotator", "/projects/{project}/label/", READY_LABEL)
        page.set_viewport_size({"width": PHONE[0], "height": PHONE[1]})
        small = page.evaluate(
            """() => [...document.querySelectorAll('#workspace button, #workspace a')]
                .filter((el) => el.getClientRects().length && !el.closest('dialog'))
                .map((el) => [el.getAttribute('aria-label') || el.textContent.trim(),
                              el.getBoundingClientRect()])
                .filter(([, r]) => r.width < 44 || r.height < 44)
                .map(([what, r]) => `${what} ${Math.round(r.width)}x${Math.round(r.height)}`)"""
        )
        assert small == []
        # The step's text has the row's width, not a column beside its buttons.
        text = page.locator("#steps .ws-step .ws-text").first.bounding_box()
        assert text is not None and text["width"] >= 0.75 * PHONE[0], text


GUIDELINES_SHOWN = [
    ("lead", "/projects/{project}/", "#dashboard .guidelines"),
    ("annotator", "/projects/{project}/", ".guidelines"),
    ("annotator", "/projects/{project}/label/", "#guidelines-dialog .guidelines"),
    ("lead", "/projects/{project}/settings/", "#guidelines-preview"),
]


def test_the_guidelines_math_is_typeset_wherever_they_are_shown(
    live_server: Any, browser: Browser, lab: Lab
) -> None:
    for who, path, where in GUIDELINES_SHOWN:
        with page_watched(browser=browser, width=1366, height=768, csp_errors=True) as page:
            _open(page, live_server, lab, who, path, "main")
            if "settings" in path:
                page.wait_for_selector("#project-settings[data-state=ready]")
                page.click("#tab-preview")
                page.wait_for_selector("#guidelines-preview .katex")
            _assert_typeset(page.locator(where), where)


def _assert_typeset(box: Any, where: str) -> None:
    # four inline formulas ($x^2 \\ge 0$, $x$, $x - 1$, $x \\ne 1$) and one display
    # formula, all typeset...
    assert box.locator(".katex").count() == 5, where
    assert box.locator(".katex-display").count() == 1, where
    # ...no formula's source left as text outside KaTeX, and the Markdown as before
    left = box.evaluate(
        """(root) => {
          const walk = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
          const out = [];
          for (let node = walk.nextNode(); node; node = walk.nextNode()) {
            if (!node.parentElement.closest('.katex')) out.push(node.textContent);
          }
          return out.join('');
        }"""
    )
    assert "$" not in left and "\\" not in left, (where, left)
    assert box.locator("table td").count() == 6, where
