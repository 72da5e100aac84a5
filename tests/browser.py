"""Driving Debian's chromium with Playwright, for the browser tests and the workspace
benchmark. Never a downloaded browser: ``playwright install`` is not part of the setup."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from playwright.sync_api import APIResponse, Browser, Page, Playwright, Route, sync_playwright

CHROMIUM = Path(os.environ.get("STEPLAB_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
PASSWORD = "pass-1234"  # what tests.factories.UserFactory sets
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def chromium_launch(*, playwright: Playwright) -> Browser:
    return playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)


@contextmanager
def chromium_running() -> Iterator[Browser]:
    """Chromium for a test module's ``browser`` fixture, closed at the end."""
    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls
    # in the same thread are still synchronous, so Django's async guard must stand aside.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    with sync_playwright() as playwright:
        launched = chromium_launch(playwright=playwright)
        yield launched
        launched.close()


@contextmanager
def page_watched(
    *,
    browser: Browser,
    width: int,
    height: int,
    accept_downloads: bool | None = None,
    csp_errors: bool = False,
) -> Iterator[Page]:
    """A fresh page for one test; on the way out, asserts that no JavaScript error (and,
    with ``csp_errors``, no Content-Security-Policy violation) reached the console."""
    context = browser.new_context(
        viewport={"width": width, "height": height}, accept_downloads=accept_downloads
    )
    context.set_default_timeout(15_000)
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    if csp_errors:
        opened.on(
            "console",
            lambda message: (
                errors.append(message.text)
                if message.type == "error" and "Content Security Policy" in message.text
                else None
            ),
        )
    yield opened
    context.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


def page_login(*, page: Page, base_url: str, username: str, password: str = PASSWORD) -> None:
    """Log in through the login form, as a person would."""
    page.goto(f"{base_url}/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("form.stacked-form button[type=submit]")
    page.wait_for_url(f"{base_url}/")


def workspace_open(*, page: Page, base_url: str, project_id: int) -> None:
    """Open the label page and wait until a chain (or the empty page) is on screen."""
    page.goto(f"{base_url}/projects/{project_id}/label/")
    page.wait_for_selector("#workspace[data-state=ready], #workspace[data-state=empty]")


def page_overflow(page: Page, width: int | None = None) -> list[str]:
    """Up to 8 elements past the screen's right edge when the page itself scrolls
    sideways (a table scrolling inside its own box does not count); [] when it fits.
    ``width``: the viewport's by default."""
    return page.evaluate(
        """(width) => {
          width = width || document.documentElement.clientWidth;
          if (document.documentElement.scrollWidth <= width) return [];
          return [...document.querySelectorAll('body *')]
            .filter((el) => el.getBoundingClientRect().right > width + 1)
            .slice(0, 8)
            .map((el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : ''));
        }""",
        width,
    )


def page_clipped_sideways(page: Page) -> list[str]:
    """Up to 8 boxes whose content is wider than the box, so part of it is hidden or only
    reached by scrolling that box sideways: a table cut off in its card, math clipped by
    ``overflow: hidden``. Only math and code may scroll inside their own box (KaTeX's
    display boxes, ``pre``, and a box marked ``data-scroll-x``), and a one-line input its
    own value (a long project name in its field: the caret reaches all of it); text cut
    with an ellipsis is not counted. [] when everything is in view."""
    return page.evaluate(
        """() => {
          const own = '.katex-display, .katex, pre, [data-scroll-x], input';
          return [...document.querySelectorAll('body *')]
            .filter((el) => {
              if (el.scrollWidth <= el.clientWidth + 1 || el.clientWidth <= 1) return false;
              const style = getComputedStyle(el);
              if (style.overflowX === 'visible') return false;
              if (style.textOverflow === 'ellipsis') return false;
              if (el.closest(own)) return false;
              return el.getClientRects().length > 0;
            })
            .slice(0, 8)
            .map((el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
              (el.className && typeof el.className === 'string'
                ? '.' + el.className.trim().split(/\\s+/).join('.') : '') +
              ` (${el.scrollWidth} > ${el.clientWidth})`);
        }"""
    )


def page_signed_in(*, page: Page, base_url: str, user: Any) -> None:
    """Signs ``user`` in by a session cookie (Django's test client), without the login
    form: for tests that are about a page, not about signing in."""
    from django.test import Client

    client = Client()
    client.force_login(user)
    cookie = client.cookies["sessionid"]
    page.context.add_cookies([{"name": "sessionid", "value": cookie.value, "url": base_url}])


class AnswerHeld:
    """The first request of ``page`` to a URL matching ``pattern`` (and ``wanted``, when
    given): answered by the server at once, handed to the page only on ``release()``, so
    that it arrives after any newer one. The page's other requests go as usual."""

    def __init__(
        self, page: Page, pattern: str, wanted: Callable[[str], bool] = lambda url: True
    ) -> None:
        self.page = page
        self.wanted = wanted
        self.held: list[tuple[Route, APIResponse]] = []
        page.route(re.compile(pattern), self._route)

    def _route(self, route: Route) -> None:
        if not self.held and route.request.method == "GET" and self.wanted(route.request.url):
            self.held.append((route, route.fetch()))
        else:
            route.continue_()

    def wait(self, timeout: float = 15.0) -> None:
        """Until the request is made (and answered, held); fails after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not self.held:
            if time.monotonic() > deadline:
                raise AssertionError(f"no request was held within {timeout:g} s")
            self.page.wait_for_timeout(20)

    def release(self) -> None:
        """Hands the held answer to the page, and gives its script time to draw it."""
        route, answer = self.held[0]
        url = route.request.url
        with self.page.expect_event("requestfinished", lambda request: request.url == url):
            route.fulfill(response=answer)
        self.page.evaluate("() => new Promise((resolve) => setTimeout(resolve, 300))")
