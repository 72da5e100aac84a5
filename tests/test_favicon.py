"""Every page names its icon, and the icon is served (browsers otherwise ask for a
/favicon.ico that 404s on every page load)."""

from __future__ import annotations

from typing import Any

from django.contrib.staticfiles import finders


def test_pages_name_an_icon_that_exists(client: Any) -> None:
    page = client.get("/login/")
    assert page.status_code == 200
    assert b'rel="icon"' in page.content and b"img/favicon.svg" in page.content
    found = finders.find("img/favicon.svg")
    assert found is not None and "<svg" in open(found).read()
