"""`POST /api/v1/projects/{id}/imports/`: access, payloads, rejections, the size limit."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from rest_framework.authtoken.models import Token
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIClient

from annotation.models import Annotation, Chain, ImportBatch, Project, Role, Step, StepRating
from tests.factories import ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db

GOOD = (
    b'{"problem": "What is 2+2?", "steps": ["2+2=4", "So 4"], "labels": [1, 1]}\n'
    b'{"problem": "What is 3+3?", "steps": ["3+3=6"]}\n'
)


def url(project: Project | int) -> str:
    return f"/api/v1/projects/{getattr(project, 'pk', project)}/imports/"


def upload(content: bytes, name: str = "chains.jsonl") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content, content_type="application/jsonl")


def counts() -> tuple[int, ...]:
    return tuple(m.objects.count() for m in (ImportBatch, Chain, Step, Annotation, StepRating))


@pytest.fixture
def lead(project: Project, make_member: Callable[..., Any]) -> Any:
    return make_member(project, Role.LEAD)


def test_a_lead_imports_a_file(project: Project, lead: Any, client_for: Callable) -> None:
    response = client_for(lead).post(url(project), {"file": upload(GOOD)}, format="multipart")

    assert response.status_code == 201, response.content
    assert response.json() == {
        "batch_id": ImportBatch.objects.get().pk,
        "filename": "chains.jsonl",
        "format": "generic",
        "chains_created": 2,
        "chains_duplicate": 0,
        "steps_created": 3,
        "labels_created": 2,
        "already_imported": False,
    }
    batch = ImportBatch.objects.get()
    assert (batch.project, batch.created_by) == (project, lead)
    assert Chain.objects.filter(project=project).count() == 2
    assert Annotation.objects.get().annotator is None


def test_the_same_file_again_is_200_and_adds_nothing(
    project: Project, lead: Any, client_for: Callable
) -> None:
    client = client_for(lead)
    first = client.post(url(project), {"file": upload(GOOD)}, format="multipart")
    before = counts()

    again = client.post(url(project), {"file": upload(GOOD, "again.jsonl")}, format="multipart")

    assert again.status_code == 200
    assert again.json()["already_imported"] is True
    assert again.json()["batch_id"] == first.json()["batch_id"]
    assert again.json()["chains_created"] == 0
    assert counts() == before


@pytest.mark.parametrize(("who", "status"), [("annotator", 403), ("ml", 403), ("outsider", 404)])
def test_only_leads_may_import(
    project: Project, make_member: Callable[..., Any], client_for: Callable, who: str, status: int
) -> None:
    if who == "outsider":
        user = make_member(ProjectFactory(), Role.LEAD)
    else:
        user = make_member(project, who)

    response = client_for(user).post(url(project), {"file": upload(GOOD)}, format="multipart")

    assert response.status_code == status
    assert counts() == (0, 0, 0, 0, 0)


def test_anonymous_callers_are_refused(project: Project) -> None:
    response = APIClient().post(url(project), {"file": upload(GOOD)}, format="multipart")

    assert response.status_code in (401, 403)
    assert counts() == (0, 0, 0, 0, 0)


def test_an_unknown_project_is_404(lead: Any, client_for: Callable) -> None:
    response = client_for(lead).post(url(999_999), {"file": upload(GOOD)}, format="multipart")

    assert response.status_code == 404


def test_a_superuser_may_import_anywhere(project: Project, client_for: Callable) -> None:
    admin = UserFactory(is_staff=True, is_superuser=True)

    response = client_for(admin).post(url(project), {"file": upload(GOOD)}, format="multipart")

    assert response.status_code == 201


def test_a_bad_file_is_400_with_every_bad_line_and_nothing_written(
    project: Project, lead: Any, client_for: Callable
) -> None:
    content = GOOD + b'{"problem": "x", "steps": []}\n' + b'{"problem": "y"\n'

    response = client_for(lead).post(
        url(project), {"file": upload(content, "bad.jsonl")}, format="multipart"
    )

    assert response.status_code == 400
    body = response.json()
    assert body["detail"] == (
        "bad.jsonl was not imported: 2 bad lines (read as generic); nothing was written."
    )
    assert [error["line"] for error in body["errors"]] == [3, 4]
    assert all(error["reason"] for error in body["errors"])
    assert body["errors_omitted"] == 0
    assert counts() == (0, 0, 0, 0, 0)


def test_a_very_bad_file_lists_the_first_1000_lines_and_counts_the_rest(
    project: Project, lead: Any, client_for: Callable
) -> None:
    content = b'{"problem": 1, "steps": ["a"]}\n' * 1_200

    response = client_for(lead).post(
        url(project), {"file": upload(content), "format": "generic"}, format="multipart"
    )

    assert response.status_code == 400
    body = response.json()
    assert len(body["errors"]) == 1_000
    assert body["errors"][-1]["line"] == 1_000
    assert body["errors_omitted"] == 200
    assert "1,200 bad lines" in body["detail"]


def test_the_format_can_be_named(project: Project, lead: Any, client_for: Callable) -> None:
    # Given a generic file sent as ProcessBench: every record lacks ProcessBench's label
    response = client_for(lead).post(
        url(project), {"file": upload(GOOD), "format": "processbench"}, format="multipart"
    )

    assert response.status_code == 400
    assert response.json()["format"] == "processbench"
    assert [error["line"] for error in response.json()["errors"]] == [1, 2]


@pytest.mark.parametrize(
    ("data", "field"),
    [({"format": "csv"}, "format"), ({}, "file")],
)
def test_bad_form_fields_are_400(
    project: Project, lead: Any, client_for: Callable, data: dict[str, Any], field: str
) -> None:
    if field != "file":
        data = {**data, "file": upload(GOOD)}

    response = client_for(lead).post(url(project), data, format="multipart")

    assert response.status_code == 400
    assert field in response.json()


def test_an_undetectable_format_is_400_with_the_reason(
    project: Project, lead: Any, client_for: Callable
) -> None:
    response = client_for(lead).post(
        url(project), {"file": upload(b'{"colour": "blue"}\n')}, format="multipart"
    )

    assert response.status_code == 400
    assert "cannot tell the format" in response.json()["detail"]
    assert ImportBatch.objects.count() == 0


@pytest.mark.parametrize("limit", [1_000, 10])
def test_an_upload_over_the_limit_is_413(
    project: Project, lead: Any, client_for: Callable, limit: int
) -> None:
    # 1,000: the request is within the multipart slack, so the body is read and cut off
    # once the file passes the limit; 10 with a 100 kB file: refused from Content-Length
    size = 5_000 if limit == 1_000 else 100_000
    line = b'{"problem": "p", "steps": ["' + b"x" * (size - 40) + b'"]}\n'

    with override_settings(STEPLAB_IMPORT_MAX_UPLOAD_BYTES=limit):
        response = client_for(lead).post(url(project), {"file": upload(line)}, format="multipart")

    assert response.status_code == 413
    assert response.json()["detail"] == (
        f"The file is larger than the import limit of {limit:,} bytes."
    )
    assert counts() == (0, 0, 0, 0, 0)


def test_an_upload_just_under_the_limit_is_accepted(
    project: Project, lead: Any, client_for: Callable
) -> None:
    with override_settings(STEPLAB_IMPORT_MAX_UPLOAD_BYTES=len(GOOD)):
        response = client_for(lead).post(url(project), {"file": upload(GOOD)}, format="multipart")

    assert response.status_code == 201


def test_the_limit_holds_with_session_auth_and_csrf(project: Project, lead: Any) -> None:
    # Session auth checks CSRF, which parses the body before the view runs: the limit
    # must already be in force by then.
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(lead)
    token = "a" * 32
    client.cookies["csrftoken"] = token
    big = b'{"problem": "p", "steps": ["' + b"x" * 5_000 + b'"]}\n'

    with override_settings(STEPLAB_IMPORT_MAX_UPLOAD_BYTES=1_000):
        refused = client.post(
            url(project), {"file": upload(big)}, format="multipart", HTTP_X_CSRFTOKEN=token
        )
    accepted = client.post(
        url(project), {"file": upload(GOOD)}, format="multipart", HTTP_X_CSRFTOKEN=token
    )
    no_token = client.post(url(project), {"file": upload(b"{}\n")}, format="multipart")

    assert refused.status_code == 413
    assert accepted.status_code == 201
    assert no_token.status_code == 403


def test_a_large_upload_is_imported_from_its_temporary_file(
    project: Project, lead: Any, client_for: Callable, settings: Any
) -> None:
    # Given a file above FILE_UPLOAD_MAX_MEMORY_SIZE, which Django spools to disk
    buffer = io.BytesIO()
    chains = 0
    while buffer.tell() <= settings.FILE_UPLOAD_MAX_MEMORY_SIZE:
        record = {"problem": f"p{chains}", "steps": [f"step {chains} " + "y" * 200] * 3}
        buffer.write(json.dumps(record).encode() + b"\n")
        chains += 1

    response = client_for(lead).post(
        url(project), {"file": upload(buffer.getvalue(), "big.jsonl")}, format="multipart"
    )

    assert response.status_code == 201, response.content
    assert response.json()["chains_created"] == chains
    assert Step.objects.count() == 3 * chains


def test_the_real_processbench_file_over_http(
    project: Project, lead: Any, client_for: Callable, shared_data: Path
) -> None:
    path = shared_data / "processbench" / "gsm8k.json"

    with path.open("rb") as stream:
        response = client_for(lead).post(url(project), {"file": stream}, format="multipart")

    assert response.status_code == 201
    assert (response.json()["format"], response.json()["chains_created"]) == ("processbench", 400)


def test_the_endpoint_is_in_the_openapi_schema(client_for: Callable) -> None:
    response = client_for(UserFactory()).get("/api/schema/", {"format": "json"})

    operation = response.json()["paths"]["/api/v1/projects/{project_id}/imports/"]["post"]
    assert "multipart/form-data" in operation["requestBody"]["content"]
    assert {"200", "201", "400", "413"} <= set(operation["responses"])


@pytest.mark.parametrize("auth", ["forced", "token"])
def test_the_largest_chain_the_limits_accept_is_imported_leased_and_submitted(
    project: Project,
    lead: Any,
    make_member: Callable[..., Any],
    client_for: Callable,
    settings: Any,
    auth: str,
) -> None:
    # Given a chain at every per-chain limit: the most steps, each as long as allowed
    steps, step_chars = settings.STEPLAB_IMPORT_MAX_STEPS, settings.STEPLAB_IMPORT_MAX_STEP_CHARS
    record = {
        "problem": "q" * settings.STEPLAB_IMPORT_MAX_PROBLEM_CHARS,
        "steps": [(f"{index} " + "s" * step_chars)[:step_chars] for index in range(steps)],
        "answer": "a" * settings.STEPLAB_IMPORT_MAX_PROBLEM_CHARS,
    }
    imported = client_for(lead).post(
        url(project), {"file": upload(json.dumps(record).encode() + b"\n")}, format="multipart"
    )
    assert imported.status_code == 201, imported.content

    # When an annotator leases it and submits a comment at its limit on every step and a
    # rewrite at its limit, every character one that JSON escapes in 6 bytes (\u0001)
    # (the queue answers a token's requests by its token door, a forced login's in DRF)
    member = make_member(project, Role.ANNOTATOR)
    if auth == "token":
        annotator = APIClient()
        annotator.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=member).key}")
    else:
        annotator = client_for(member)
    leased = annotator.post(f"/api/v1/projects/{project.pk}/assignments/next/")
    assert leased.status_code == 200
    chain = leased.json()["chain"]
    assert len(chain["steps"]) == steps
    body = {
        "ratings": [
            {"step": step["id"], "rating": -1, "comment": "\x01" * 10_000, "duration_ms": 2**31 - 1}
            for step in chain["steps"]
        ],
        "rewrite": "\x01" * 20_000,
        "duration_ms": 2**31 - 1,
        "request_id": "r" * 100,
    }
    encoded = JSONRenderer().render(body)
    submitted = annotator.post(
        f"/api/v1/assignments/{leased.json()['assignment']['id']}/submit/",
        encoded,
        content_type="application/json",
    )

    # Then the body fits the request limit and the submit is recorded
    assert submitted.status_code == 201, submitted.content[:500]
    assert len(encoded) <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    assert StepRating.objects.filter(comment="\x01" * 10_000).count() == steps
