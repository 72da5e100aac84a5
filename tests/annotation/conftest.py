"""Fixtures shared by the browser tests of the annotation pages."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from tests.browser import chromium_running


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's chromium, one per test module; each module's ``page`` fixture opens its
    pages in it."""
    with chromium_running() as launched:
        yield launched
