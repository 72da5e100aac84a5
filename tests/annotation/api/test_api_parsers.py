"""JSON request bodies: one nested too deeply for Python's json is a 400, not a 500."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from annotation.models import Project, Role

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("body", [b"[" * 100_000, b'{"a":' * 50_000], ids=["arrays", "objects"])
def test_a_json_body_nested_too_deeply_is_a_400(
    project: Project, make_member: Callable[..., Any], client_for: Callable, body: bytes
) -> None:
    client = client_for(make_member(project, Role.LEAD))

    response = client.patch(
        f"/api/v1/projects/{project.pk}/", body, content_type="application/json"
    )

    assert response.status_code == 400
    assert response.json() == {"detail": "JSON parse error - nested too deeply"}


@pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN", "Infinity"])
def test_a_json_number_no_double_holds_is_a_400(
    project: Project, make_member: Callable[..., Any], client_for: Callable, number: str
) -> None:
    """``1e400`` is JSON but Python reads it as infinity; NaN and Infinity are not JSON."""
    client = client_for(make_member(project, Role.LEAD))

    response = client.patch(
        f"/api/v1/projects/{project.pk}/",
        f'{{"gold_rate": {number}}}',
        content_type="application/json",
    )

    assert response.status_code == 400
    assert response.json()["detail"].startswith("JSON parse error")
