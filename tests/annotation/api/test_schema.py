"""The OpenAPI schema and the docs pages: valid, warning-free, and served without a CDN."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client

OUR_OPERATIONS = {
    ("/api/v1/auth/token/", "post"): "auth_token_create",
    ("/api/v1/auth/token/", "delete"): "auth_token_destroy",
    ("/api/v1/projects/", "get"): "projects_list",
    ("/api/v1/projects/", "post"): "projects_create",
    ("/api/v1/projects/{project_id}/", "get"): "projects_retrieve",
    ("/api/v1/projects/{project_id}/", "patch"): "projects_partial_update",
    ("/api/v1/projects/{project_id}/members/", "get"): "projects_members_list",
    ("/api/v1/projects/{project_id}/members/", "post"): "projects_members_create",
    ("/api/v1/projects/{project_id}/members/{user_id}/", "delete"): "projects_members_destroy",
    (
        "/api/v1/projects/{project_id}/members/{user_id}/",
        "patch",
    ): "projects_members_partial_update",
    ("/api/v1/guidelines/preview/", "post"): "guidelines_preview",
    ("/api/v1/projects/{project_id}/invites/", "get"): "projects_invites_list",
    ("/api/v1/projects/{project_id}/invites/", "post"): "projects_invites_create",
    ("/api/v1/projects/{project_id}/invites/bulk/", "post"): "projects_invites_bulk",
    (
        "/api/v1/projects/{project_id}/invites/{invite_id}/revoke/",
        "post",
    ): "projects_invites_revoke",
}


def test_schema_generates_without_warnings_and_validates(tmp_path: Path) -> None:
    # --fail-on-warn turns any generator warning (a view the generator cannot read, an
    # untyped field) into an error; --validate checks the result against the OpenAPI spec.
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    schema = yaml.safe_load(out.read_text())
    for (path, method), operation_id in OUR_OPERATIONS.items():
        assert schema["paths"][path][method]["operationId"] == operation_id
    # Token login is open; everything else needs a token or a session.
    assert schema["paths"]["/api/v1/auth/token/"]["post"].get("security") in (None, [])
    assert {"tokenAuth": []} in schema["paths"]["/api/v1/projects/"]["get"]["security"]


@pytest.mark.django_db
def test_schema_endpoint_serves_openapi() -> None:
    response = Client().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    assert response.json()["openapi"].startswith("3.")


def _asset_urls(html: str) -> list[str]:
    return re.findall(r'(?:src|href)="([^"]+)"', html)


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["/api/docs/", "/api/redoc/"])
def test_docs_pages_load_only_local_assets(url: str) -> None:
    response = Client().get(url)
    assert response.status_code == 200
    html = response.content.decode()
    assets = _asset_urls(html)
    assert assets, "the page should load Swagger UI / Redoc"
    # Nothing from another origin: no scheme, no protocol-relative URL.
    assert not re.search(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}", html, re.IGNORECASE), html
    for asset in assets:
        assert asset.startswith(("/static/", "/api/")), asset
        if asset.startswith("/static/"):
            assert finders.find(asset.removeprefix("/static/")), f"{asset} is not a static file"


@pytest.mark.django_db
def test_swagger_ui_has_no_inline_script_and_its_script_points_at_our_schema() -> None:
    html = Client().get("/api/docs/").content.decode()
    scripts = re.findall(r"<script([^>]*)>", html)
    assert scripts and all("src=" in attrs for attrs in scripts)
    script_url = next(
        u for u in _asset_urls(html) if u.startswith("/api/docs/") and "script" in u
    ).replace("&amp;", "&")
    script = Client().get(script_url)
    assert script.status_code == 200
    assert "/api/schema/" in script.content.decode()
