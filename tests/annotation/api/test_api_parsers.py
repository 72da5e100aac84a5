"""JSON request bodies: one nested too deeply for Python's json is a 400, not a 500; what a
body may parse into (values, nesting, the longest string) is bounded per endpoint before
anything is decoded (annotation/api/parsers.py)."""

from __future__ import annotations

import json
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
    # Refused by the byte scan before the decoder recurses: more values than allowed, and
    # deeper than allowed
    assert response.json()["detail"].startswith("JSON parse error - the body holds")


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


TEN_MIB = 10 * 1024 * 1024
EMPTY_OBJECTS = b"[" + b"{}," * (TEN_MIB // 3 - 2) + b"{}]"  # just under 10 MiB


def test_ten_mib_of_empty_objects_is_refused_before_any_is_built(client: Any) -> None:
    # Given: an anonymous caller, a body of 3.5 million empty objects (just under the
    # 10 MiB byte limit), to the token sign-in
    import tracemalloc

    tracemalloc.start()
    # When: it is posted
    response = client.post("/api/v1/auth/token/", EMPTY_OBJECTS, content_type="application/json")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    # Then: 400 naming the bound, and what the server held is the body's bytes, not the
    # 250 MB of dicts it would have decoded into
    assert response.status_code == 400
    assert response.json()["detail"] == (
        "JSON parse error - the body holds more than 20,000 values (array items and object members)"
    )
    assert peak < 4 * TEN_MIB


def test_a_string_longer_than_any_field_is_refused(client: Any) -> None:
    body = json.dumps({"username": "a" * 300_000, "password": "x"})
    response = client.post("/api/v1/auth/token/", body, content_type="application/json")
    assert response.status_code == 400
    assert "a string longer than 240,000 bytes" in response.json()["detail"]


def test_guidelines_of_the_longest_kind_pass_the_bound_of_their_endpoint(
    project: Project, make_member: Callable[..., Any], client_for: Callable
) -> None:
    # Given: guidelines of 60,000 characters that json.dumps writes as \\u escapes (six
    # bytes each: 360,000 bytes, over the default bound on a string)
    client = client_for(make_member(project, Role.LEAD))
    guidelines = "\u00e9" * 60_000

    # When: they are previewed and saved
    body = json.dumps({"guidelines": guidelines})
    preview = client.post("/api/v1/guidelines/preview/", body, content_type="application/json")
    saved = client.patch(f"/api/v1/projects/{project.pk}/", body, content_type="application/json")

    # Then: both take them; another endpoint's string of that size is refused
    assert preview.status_code == 200, preview.content
    assert saved.status_code == 200, saved.content
    skip = client.post(
        "/api/v1/assignments/1/skip/",
        json.dumps({"reason": guidelines}),
        content_type="application/json",
    )
    assert skip.status_code == 400 and "a string longer than" in skip.json()["detail"]


def test_the_token_door_hands_a_body_past_the_bound_to_drf() -> None:
    # The queue's token door parses its own bodies (orjson); one past the API's bound is
    # left to DRF, whose parser refuses it as above.
    from django.test import RequestFactory

    from annotation.labeling.api.token_door import json_body

    body = b"[" + b"{}," * 300_000 + b"{}]"  # under the door's 1 MiB, 300,001 values
    request = RequestFactory().post("/", body, content_type="application/json")
    assert json_body(request) is None
    fine = RequestFactory().post("/", b'{"ratings": []}', content_type="application/json")
    assert json_body(fine) == {"ratings": []}
