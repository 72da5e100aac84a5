"""Driving Debian's chromium with Playwright, for the browser tests and the workspace
benchmark. Never a downloaded browser: ``playwright install`` is not part of the setup."""

from __future__ import annotations

import os
from pathlib import Path

from playwright.sync_api import Browser, Page, Playwright

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
