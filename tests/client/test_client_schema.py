"""The client against the API it was written for: every (method, path) in the client's
endpoint table must be an operation of the live server's OpenAPI schema, so an API
change that would break the client (a path renamed, a method dropped) fails here."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from steplab_client import cli_parser as cli
from steplab_client.endpoints import ENDPOINTS

pytestmark = pytest.mark.django_db(transaction=True)


def _served_schema(url: str) -> dict[str, Any]:
    response = httpx.get(f"{url}/api/schema/", params={"format": "json"})
    assert response.status_code == 200, response.text
    schema: dict[str, Any] = response.json()
    return schema


def _resolved(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with its ``$ref`` (or a lone ``allOf`` of one) followed."""
    while True:
        if "$ref" in node:
            node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
        elif len(node.get("allOf", [])) == 1:
            node = node["allOf"][0]
        else:
            return node


def test_every_endpoint_the_client_calls_is_in_the_served_schema(live_server: Any) -> None:
    # Given: the schema the running server serves, as a client would fetch it
    schema = _served_schema(live_server.url)
    operations = {
        (method.upper(), path)
        for path, methods in schema["paths"].items()
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


def test_the_command_lines_choices_are_the_apis(live_server: Any) -> None:
    # Given: the served schema's export and import operations
    schema = _served_schema(live_server.url)
    export = schema["paths"][ENDPOINTS["export"].path]["get"]
    parameters = {item["name"]: item["schema"] for item in export["parameters"]}
    upload = schema["paths"][ENDPOINTS["imports.create"].path]["post"]
    form = _resolved(schema, upload["requestBody"]["content"]["multipart/form-data"]["schema"])

    # Then: `steplab export` and `steplab import` offer exactly the formats and splits the
    # API takes (a new export format shows up in --help, a dropped one is not offered)
    assert set(cli.EXPORT_FORMATS) == set(parameters["format"]["enum"])
    assert set(cli.SPLITS) == set(parameters["split"]["enum"])
    assert set(cli.IMPORT_FORMATS) == set(_resolved(schema, form["properties"]["format"])["enum"])


def test_the_webhook_events_are_the_apis(live_server: Any) -> None:
    # `steplab webhooks create --event` offers exactly the events the API takes
    schema = _served_schema(live_server.url)
    create = schema["paths"][ENDPOINTS["webhooks.create"].path]["post"]
    body = _resolved(schema, create["requestBody"]["content"]["application/json"]["schema"])
    events = _resolved(schema, body["properties"]["events"]["items"])
    assert set(cli.WEBHOOK_EVENTS) == set(events["enum"])
