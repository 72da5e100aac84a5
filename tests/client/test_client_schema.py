"""The client against the API it was written for: every (method, path) in the client's
endpoint table must be an operation of the live server's OpenAPI schema, so an API
change that would break the client (a path renamed, a method dropped) fails here."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from steplab_client.endpoints import ENDPOINTS

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_endpoint_the_client_calls_is_in_the_served_schema(live_server: Any) -> None:
    # Given: the schema the running server serves, as a client would fetch it
    response = httpx.get(f"{live_server.url}/api/schema/", params={"format": "json"})
    assert response.status_code == 200, response.text
    operations = {
        (method.upper(), path)
        for path, methods in response.json()["paths"].items()
        for method in methods
        if method in ("get", "post", "put", "patch", "delete")
    }

    # Then: each of the client's calls is one of its operations
    missing = sorted(
        f"{name}: {endpoint.method} {endpoint.path}"
        for name, endpoint in ENDPOINTS.items()
        if (endpoint.method, endpoint.path) not in operations
    )
    assert not missing, "the client calls operations the API does not have:\n" + "\n".join(missing)
    assert len(ENDPOINTS) >= 40
