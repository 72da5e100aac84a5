"""Bad bodies on every endpoint: a JSON body nested 1,000 or 100,000 deep and a body one
byte over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` get a 4xx with a reason, in JSON under /api/,
for an anonymous caller and for one with a token who may call the endpoint (the token
also takes the lean next/submit path). Never a 5xx, never an HTML page under /api/.

The endpoints come from the security matrix (tests/test_security_matrix.py), which fails
when a route is missing from it, so a new endpoint is covered here too."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from tests.factories import api_token_key
from tests.test_security_matrix import MATRIX, OK, ROLES, named_routes, route_url
from tests.test_security_matrix import world as world  # noqa: F401 (the fixture)
from tests.test_security_matrix import world_rows as world_rows  # noqa: F401

LIMIT = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
TOO_LARGE_DETAIL = f"Request body too large: the limit is {LIMIT} bytes (10 MiB)."
# One byte over the limit, well-formed JSON so only the size is wrong.
OVERSIZED = b'{"reason": "' + b"x" * (LIMIT - 13) + b'"}'
BODIES = {
    "deep-1000": b"[" * 1_000 + b"]" * 1_000,
    "deep-100000": b'{"a":' * 100_000,
    "oversized": OVERSIZED,
}
# Endpoints whose request has no body: what is sent is not read.
NO_BODY = {
    "api-auth-token",  # DELETE signs out
    "api-auth-token-revoke",  # DELETE revokes one of the caller's tokens
    "assignment-next",
    "assignment-prefetch",
    "assignment-renew",
    "api-training-run-cancel",
    "api-training-run-retry",
    "api-scoring-run-cancel",
    "api-scoring-run-retry",
    "api-simulation-run-cancel",
    "api-simulation-run-retry",
    "api-machine-label-run-cancel",
    "api-machine-label-run-retry",
    "api-evaluation-run-cancel",
    "api-project-member",  # DELETE removes a member
    "api-model-version-activate",
    "api-gold-screening-reset",
    "api-chain-unflag",
    "api-project-routing-run",
    "api-evaluation-set",  # DELETE unmarks the set
}
# One method of an endpoint whose others take a body.
NO_BODY_METHODS = {
    ("delete", "api-project-webhook"),  # DELETE removes the webhook; PATCH changes it
}
WRITE_METHODS = ("post", "put", "patch", "delete")


def _no_body(name: str, method: str) -> bool:
    return (name in NO_BODY and (method, name) != ("post", "api-auth-token")) or (
        method,
        name,
    ) in NO_BODY_METHODS


def _api_cases() -> list[Any]:
    cases = []
    for name, methods in MATRIX.items():
        route, _pattern = named_routes()[name]
        if not route.startswith("api/v1/"):
            continue
        for method, statuses in methods.items():
            if method not in WRITE_METHODS:
                continue
            # The caller: anonymous, and the first role that may call the endpoint.
            allowed = next((ROLES[i] for i, s in enumerate(statuses) if s == OK), None)
            for caller in ("anonymous", allowed or "lead"):
                for body in BODIES:
                    cases.append(
                        pytest.param(
                            name, method, caller, body, id=f"{name}-{method}-{caller}-{body}"
                        )
                    )
    return cases


def _reason(response: Any) -> Any:
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    payload = response.json()
    assert payload, "an error with no reason"
    return payload


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "method", "caller", "body"), _api_cases())
def test_every_api_endpoint_answers_bad_bodies_with_a_json_4xx(
    world: dict[str, Any],  # noqa: F811 (the fixture imported above)
    name: str,
    method: str,
    caller: str,
    body: str,
) -> None:
    assert OVERSIZED.count(b"x") == LIMIT - 13 and len(OVERSIZED) == LIMIT + 1
    client = APIClient()
    if caller != "anonymous":
        key = api_token_key(world["users"][caller])
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    response = client.generic(
        method.upper(), route_url(name, world["ids"]), BODIES[body], content_type="application/json"
    )

    assert response.status_code < 500, (response.status_code, response.content[:300])
    if _no_body(name, method):
        # An endpoint whose request has no body never reads one: it answers as it would
        # to an empty body (and in JSON when that is an error)
        if response.status_code >= 400:
            _reason(response)
        return
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
    payload = _reason(response)
    access = MATRIX[name][method][ROLES.index(caller)]
    if access not in (OK, 400):
        # Refused before the body is read (401, 403, 404): the matrix's own answer
        assert response.status_code == access
    elif body == "oversized" and response.status_code not in (405, 415):
        # Past the access checks the size is what is wrong, and the answer says the limit
        assert response.status_code == 413
        assert payload == {"detail": TOO_LARGE_DETAIL}
    elif body.startswith("deep") and response.status_code == 400:
        # Refused by the scan of its shape (annotation/api/parsers.py) before any decoding:
        # deeper, and with more values, than any endpoint takes
        assert payload["detail"].startswith("JSON parse error - the body holds"), payload


def _unknown_field_cases() -> list[Any]:
    cases = []
    for name, methods in MATRIX.items():
        route, _pattern = named_routes()[name]
        if not route.startswith("api/v1/") or name in NO_BODY:
            continue
        for method, statuses in methods.items():
            allowed = next((ROLES[i] for i, s in enumerate(statuses) if s == OK), None)
            if method in WRITE_METHODS and allowed is not None and not _no_body(name, method):
                cases.append(pytest.param(name, method, allowed, id=f"{name}-{method}"))
    return cases


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "method", "caller"), _unknown_field_cases())
def test_every_api_endpoint_refuses_a_field_it_does_not_know_with_a_400(
    world: dict[str, Any],  # noqa: F811 (the fixture imported above)
    name: str,
    method: str,
    caller: str,
) -> None:
    """A misspelt or stray field is a 400 naming it, never silently ignored."""
    client = APIClient()
    key = api_token_key(world["users"][caller])
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    response = client.generic(
        method.upper(),
        route_url(name, world["ids"]),
        b'{"no_such_field": 1}',
        content_type="application/json",
    )

    # (The imports take a multipart body only: JSON there is a 415, read no further.)
    expected = (415,) if name == "api-project-imports" else (400, 405)
    assert response.status_code in expected, (response.status_code, response.content[:300])
    if response.status_code == 400:
        assert "no_such_field" in response.content.decode(), response.content[:300]


@pytest.mark.django_db
def test_the_token_endpoint_refuses_an_oversized_form_with_413(api_client: APIClient) -> None:
    body = b"username=" + b"x" * LIMIT + b"&password=y"

    response = api_client.generic(
        "POST", "/api/v1/auth/token/", body, content_type="application/x-www-form-urlencoded"
    )

    assert response.status_code == 413
    assert response.json() == {"detail": TOO_LARGE_DETAIL}


@pytest.mark.django_db
def test_the_login_page_refuses_an_oversized_form_with_413(client: Any) -> None:
    body = b"username=" + b"x" * LIMIT + b"&password=y"

    response = client.generic(
        "POST", "/login/", body, content_type="application/x-www-form-urlencoded"
    )

    assert response.status_code == 413
    assert response.content.decode() == TOO_LARGE_DETAIL


@pytest.mark.django_db
def test_an_unknown_api_path_is_a_json_404(api_client: APIClient) -> None:
    response = api_client.get("/api/v1/no-such-thing/")

    assert response.status_code == 404
    assert response.json() == {"detail": "Not found."}


@pytest.mark.django_db
def test_an_unknown_page_keeps_the_html_404(client: Any) -> None:
    response = client.get("/no-such-page/")

    assert response.status_code == 404
    assert b"Not found" in response.content and response["Content-Type"].startswith("text/html")


def test_the_submit_refuses_unknown_keys_in_its_body_and_in_each_rating() -> None:
    """The submit's hand-run validation (the hot path) keeps the rule too."""
    from rest_framework.exceptions import ValidationError

    from annotation.api.inputs import UNKNOWN_FIELD
    from annotation.labeling.api.submit_input import submit_input_validate

    body = {"ratings": [{"step": 1, "rating": 1}, {"step": 2, "rating": 1, "comentt": "x"}]}
    with pytest.raises(ValidationError) as caught:
        submit_input_validate({**body, "rewritten": ""})
    assert caught.value.detail == {
        "ratings": {1: {"comentt": [UNKNOWN_FIELD]}},
        "rewritten": [UNKNOWN_FIELD],
    }
    assert len(submit_input_validate({**body, "ratings": body["ratings"][:1]})["ratings"]) == 1
