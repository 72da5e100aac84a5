"""Integers past their column: every integer an endpoint reads (body field, query or path
parameter) states its range in the OpenAPI schema, and a value past it (2**31, 2**40,
2**63, 2**70 and -2**70) is a 4xx in JSON, never a 5xx or a value stored wrapped.

The operations come from the schema itself, so a new integer input is covered too; the
caller of each is the first role the security matrix lets through."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import resolve
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from annotation.models import Snapshot
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings, api_token_key
from tests.test_security_matrix import MATRIX, OK, ROLES
from tests.test_security_matrix import world as world  # noqa: F401 (the fixture)
from tests.test_security_matrix import world_rows as world_rows  # noqa: F401

VALUES = (2**31, 2**40, 2**63, 2**70, -(2**70))


def _schema() -> dict[str, Any]:
    return SchemaGenerator().get_schema(request=None, public=True)


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].split("/")[-1]]
    return node


def _integer_inputs(schema: dict[str, Any]) -> list[tuple[str, str, str, dict[str, Any]]]:
    """(path, method, where, integer schema): where is "path:NAME", "query:NAME" or a
    body path such as "body.ratings[].step"."""
    found = []

    def walk(path: str, method: str, where: str, node: dict[str, Any]) -> None:
        node = _resolve(schema, node)
        for part in node.get("allOf", []) + node.get("oneOf", []) + node.get("anyOf", []):
            walk(path, method, where, part)
        if node.get("type") == "integer":
            found.append((path, method, where, node))
        for key, child in node.get("properties", {}).items():
            if not child.get("readOnly"):
                walk(path, method, f"{where}.{key}", child)
        if node.get("type") == "array" and "items" in node:
            walk(path, method, f"{where}[]", node["items"])

    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                if parameter.get("schema", {}).get("type") == "integer":
                    where = f"{parameter['in']}:{parameter['name']}"
                    found.append((path, method, where, parameter["schema"]))
            content = operation.get("requestBody", {}).get("content", {})
            if "application/json" in content:
                walk(path, method, "body", content["application/json"]["schema"])
    return found


def test_every_integer_input_states_its_range_in_the_schema() -> None:
    unbounded = [
        f"{method.upper()} {path} {where}"
        for path, method, where, node in _integer_inputs(_schema())
        if ("minimum" not in node or "maximum" not in node) and "enum" not in node
    ]
    assert unbounded == []


def _body(where: str, value: int) -> dict[str, Any]:
    """{"a": {"b": [{"c": value}]}} for "body.a.b[].c"."""
    parts = where.split(".")[1:]

    def build(index: int) -> Any:
        name = parts[index]
        inner: Any = value if index == len(parts) - 1 else build(index + 1)
        if name.endswith("[]"):
            return {name[:-2]: [inner]}
        return {name: inner}

    return build(0)


def _base_body(name: str, where: str, ids: dict[str, int]) -> dict[str, Any]:
    """The rest of a body that needs more than the field under test to reach it: a bulk
    action names its action, its count (not the preview) and a selection (a chain, or the
    filter tested); a machine-label run its kind (a sampling run's problems, a judge's
    chains) and a model."""
    if name == "api-machine-label-runs":
        return {"kind": "sample" if "problems" in where else "judge", "model": "lm"}
    if name not in ("api-chains-bulk", "api-chains-bulk-preview"):
        return {}
    # An evaluation set is read by the actions that take one.
    action = "evaluation_add" if where == "body.evaluation_set" else "unflag"
    base: dict[str, Any] = {"action": action}
    if name == "api-chains-bulk":
        base["expected"] = 0  # the confirmed count; the preview takes none (unknown: a 400)
    if not where.startswith("body.filters"):
        base["chain_ids"] = [ids["chain_id"]]
    return base


def _cases() -> list[Any]:
    return [
        pytest.param(path, method, where, value, id=f"{method}-{path}-{where}-{value}")
        for path, method, where, _node in _integer_inputs(_schema())
        for value in VALUES
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "method", "where", "value"), _cases())
def test_an_integer_past_its_range_is_a_json_4xx(
    world: dict[str, Any],  # noqa: F811 (the fixture imported above)
    path: str,
    method: str,
    where: str,
    value: int,
) -> None:
    # Given: the path with the world's ids (or the value, for the parameter under test)
    ids = world["ids"]
    url = re.sub(
        r"\{(\w+)\}",
        lambda m: str(value) if where == f"path:{m.group(1)}" else str(ids[m.group(1)]),
        path,
    )
    name = resolve(re.sub(r"\{(\w+)\}", lambda m: str(ids[m.group(1)]), path)).url_name
    statuses = MATRIX[name][method]
    caller = next((ROLES[i] for i, s in enumerate(statuses) if s == OK), "lead")
    client = APIClient()  # with a token: next and submit take their token door
    key = api_token_key(world["users"][caller])
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")

    # When: the value is sent where the schema has an integer
    if where.startswith("query:"):
        response = getattr(client, method)(url, {where[6:]: value})
    elif where.startswith("body"):
        body = {**_base_body(name, where, ids), **_body(where, value)}
        response = getattr(client, method)(url, body, format="json")
    else:
        response = getattr(client, method)(url, format="json")

    # Then: a refusal in JSON, never a server error
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
    if where.startswith("path:") and response.status_code == 404:
        return  # no such route: an id past a bigint names nothing
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    if response.status_code == 400 and where.startswith("body"):
        # ...that names the field
        assert where.split(".")[1].removesuffix("[]") in response.content.decode()


@pytest.mark.django_db
def test_a_seed_past_its_column_is_refused_not_stored_wrapped(project, make_member) -> None:
    # Given: a project with a labeled (finished) chain, and its lead
    chain = ChainFactory(project=project, finished_count=1, is_finished=True)
    annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[1, 1, 1])
    client = APIClient()
    client.force_login(make_member(project, "lead"))
    url = f"/api/v1/projects/{project.pk}/snapshots/"

    # When: snapshots are asked for with the largest seed the column holds, and past it
    largest = client.post(url, {"seed": 2**31 - 1}, format="json")
    past = client.post(url, {"seed": 2**40}, format="json")

    # Then: the first is stored as given, the second refused and nothing stored
    assert largest.status_code == 201 and largest.json()["seed"] == 2**31 - 1
    assert Snapshot.objects.get(project=project).seed == 2**31 - 1
    assert past.status_code == 400 and "seed" in past.json()
    assert Snapshot.objects.filter(project=project).count() == 1


@pytest.mark.django_db
@pytest.mark.parametrize("option", ["--seed", "--snapshot"])
@pytest.mark.parametrize("value", [2**31, 2**70, -1])
def test_export_dataset_refuses_an_integer_past_its_column(
    project, tmp_path, option: str, value: int
) -> None:
    with pytest.raises(CommandError, match=option.lstrip("-")):
        call_command(
            "export_dataset",
            str(project.pk),
            "--format",
            "trl",
            "--out",
            str(tmp_path / "out.jsonl"),
            option,
            str(value),
        )
