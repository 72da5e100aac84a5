"""`POST /api/v1/projects/{id}/imports/` and `GET .../imports/{job_id}/`: the upload is
stored and answered with a queued job (202), the job is polled to its counts or its bad
lines; access, rejections, the size limit.

The job's task is the service ``import_job_execute``, called here directly after the
upload (these tests' transaction never commits, so nothing is sent to a broker);
``test_import_worker.py`` runs it on a real Celery worker."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import override_settings
from rest_framework.renderers import JSONRenderer
from rest_framework.test import APIClient

from annotation.datasets.import_jobs import import_job_execute
from annotation.models import (
    Annotation,
    Chain,
    ImportBatch,
    ImportJob,
    Project,
    Role,
    Step,
    StepRating,
)
from tests.factories import MembershipFactory, ProjectFactory, UserFactory, api_token_key

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


def imported(client: APIClient, project: Project, data: dict[str, Any]) -> dict[str, Any]:
    """Upload, run the job (as its task does), and poll it once: the finished job."""
    queued = client.post(url(project), data, format="multipart")
    assert queued.status_code == 202, queued.content
    import_job_execute(job_id=queued.json()["id"])
    polled = client.get(queued.json()["url"])
    assert polled.status_code == 200, polled.content
    return polled.json()


@pytest.fixture
def lead(project: Project, make_member: Callable[..., Any]) -> Any:
    return make_member(project, Role.LEAD)


def test_an_upload_is_queued_as_a_job_stored_on_disk(
    project: Project, lead: Any, client_for: Callable, import_dir: Path
) -> None:
    response = client_for(lead).post(url(project), {"file": upload(GOOD)}, format="multipart")

    assert response.status_code == 202, response.content
    job = ImportJob.objects.get()
    body = response.json()
    assert body["url"] == f"{url(project)}{job.pk}/"
    assert {key: body[key] for key in ("status", "filename", "size", "records_read")} == {
        "status": "queued",
        "filename": "chains.jsonl",
        "size": len(GOOD),
        "records_read": 0,
    }
    assert (body["result"], body["errors"], body["errors_omitted"]) == (None, [], 0)
    assert (job.project, job.created_by, job.format_requested) == (project, lead, "auto")
    assert (import_dir / job.stored_name).read_bytes() == GOOD
    assert counts() == (0, 0, 0, 0, 0)  # nothing imported until the task runs


def test_a_lead_imports_a_file(
    project: Project, lead: Any, client_for: Callable, import_dir: Path
) -> None:
    job = imported(client_for(lead), project, {"file": upload(GOOD)})

    assert job["status"] == "done"
    assert job["result"] == {
        "batch_id": ImportBatch.objects.get().pk,
        "filename": "chains.jsonl",
        "format": "generic",
        "chains_created": 2,
        "chains_duplicate": 0,
        "steps_created": 3,
        "labels_created": 2,
        "already_imported": False,
        "problems_created": 0,
        "problems_duplicate": 0,
    }
    assert (job["format"], job["records_read"], job["bytes_read"]) == ("generic", 2, len(GOOD))
    assert job["started_at"] and job["finished_at"]
    batch = ImportBatch.objects.get()
    assert (batch.project, batch.created_by) == (project, lead)
    assert Chain.objects.filter(project=project).count() == 2
    assert Annotation.objects.get().annotator is None
    # The stored upload is gone once its job is done.
    assert list(import_dir.rglob("*.upload")) == []


def test_the_same_file_again_adds_nothing(
    project: Project, lead: Any, client_for: Callable
) -> None:
    client = client_for(lead)
    first = imported(client, project, {"file": upload(GOOD)})
    before = counts()

    again = imported(client, project, {"file": upload(GOOD, "again.jsonl")})

    assert again["status"] == "done"
    assert again["result"]["already_imported"] is True
    assert again["result"]["batch_id"] == first["result"]["batch_id"]
    assert again["result"]["chains_created"] == 0
    assert counts() == before


def test_a_second_delivery_of_the_task_does_nothing(
    project: Project, lead: Any, client_for: Callable
) -> None:
    job = imported(client_for(lead), project, {"file": upload(GOOD)})
    before = counts()

    import_job_execute(job_id=job["id"])
    import_job_execute(job_id=999_999)  # a job that is gone

    assert counts() == before
    assert ImportJob.objects.get().status == "done"


@pytest.mark.parametrize(("who", "status"), [("annotator", 403), ("ml", 403), ("outsider", 404)])
def test_only_leads_may_import_or_follow_an_import(
    project: Project,
    lead: Any,
    make_member: Callable[..., Any],
    client_for: Callable,
    who: str,
    status: int,
) -> None:
    if who == "outsider":
        user = make_member(ProjectFactory(), Role.LEAD)
    else:
        user = make_member(project, who)
    job = client_for(lead).post(url(project), {"file": upload(GOOD)}, format="multipart").json()

    response = client_for(user).post(url(project), {"file": upload(GOOD)}, format="multipart")
    polled = client_for(user).get(job["url"])

    assert (response.status_code, polled.status_code) == (status, status)
    assert ImportJob.objects.count() == 1
    assert counts() == (0, 0, 0, 0, 0)


def test_anonymous_callers_are_refused(project: Project, lead: Any, client_for: Callable) -> None:
    job = client_for(lead).post(url(project), {"file": upload(GOOD)}, format="multipart").json()

    response = APIClient().post(url(project), {"file": upload(GOOD)}, format="multipart")
    polled = APIClient().get(job["url"])

    assert response.status_code in (401, 403)
    assert polled.status_code in (401, 403)
    assert ImportJob.objects.count() == 1


def test_an_unknown_project_or_job_is_404(
    project: Project, lead: Any, client_for: Callable, make_member: Callable[..., Any]
) -> None:
    client = client_for(lead)
    # A job of another project the caller also leads is not found under this one.
    other = ProjectFactory()
    MembershipFactory(project=other, user=lead, role=Role.LEAD)
    other_job = ImportJob.objects.create(project=other, filename="x", stored_name="x", size=1)

    assert client.post(url(999_999), {"file": upload(GOOD)}, format="multipart").status_code == 404
    assert client.get(f"{url(project)}999999/").status_code == 404
    assert client.get(f"{url(project)}{other_job.pk}/").status_code == 404


def test_a_superuser_may_import_anywhere(project: Project, client_for: Callable) -> None:
    admin = UserFactory(is_staff=True, is_superuser=True)

    job = imported(client_for(admin), project, {"file": upload(GOOD)})

    assert job["status"] == "done"


def test_a_bad_file_fails_its_job_with_every_bad_line_and_nothing_written(
    project: Project, lead: Any, client_for: Callable, import_dir: Path
) -> None:
    content = GOOD + b'{"problem": "x", "steps": []}\n' + b'{"problem": "y"\n'

    job = imported(client_for(lead), project, {"file": upload(content, "bad.jsonl")})

    assert job["status"] == "failed"
    assert job["detail"] == (
        "bad.jsonl was not imported: 2 bad lines (read as generic); nothing was written."
    )
    assert [error["line"] for error in job["errors"]] == [3, 4]
    assert all(error["reason"] for error in job["errors"])
    assert (job["errors_omitted"], job["result"], job["format"]) == (0, None, "generic")
    assert job["records_read"] == 4
    assert counts() == (0, 0, 0, 0, 0)
    assert list(import_dir.rglob("*.upload")) == []


def test_a_json_array_names_its_bad_records_and_a_missing_key(
    project: Project, lead: Any, client_for: Callable
) -> None:
    # Given ProcessBench's layout, one JSON array on one line: the 74th record lacks its
    # label, the 75th has a null problem
    good = {"problem": "p", "steps": ["a", "b"], "label": -1}
    records = [{**good, "problem": f"p{n}"} for n in range(80)]
    records[73] = {"problem": "q", "steps": ["a"]}
    records[74] = {**good, "problem": None}
    content = json.dumps(records).encode()

    job = imported(client_for(lead), project, {"file": upload(content, "pb.json")})

    assert job["status"] == "failed"
    assert job["errors"] == [
        {
            "line": 1,
            "record": 74,
            "where": "record 74 (line 1)",
            "reason": "label: missing (expected an integer step index)",
        },
        {
            "line": 1,
            "record": 75,
            "where": "record 75 (line 1)",
            "reason": "problem: expected a string, got null",
        },
    ]
    assert counts() == (0, 0, 0, 0, 0)


def test_a_very_bad_file_lists_the_first_10000_lines_and_counts_the_rest(
    project: Project, lead: Any, client_for: Callable
) -> None:
    content = b'{"problem": 1, "steps": ["a"]}\n' * 10_200

    job = imported(client_for(lead), project, {"file": upload(content), "format": "generic"})

    assert job["status"] == "failed"
    assert len(job["errors"]) == 10_000
    assert job["errors"][-1]["line"] == 10_000
    assert job["errors_omitted"] == 200
    assert "10,200 bad lines" in job["detail"]
    assert counts() == (0, 0, 0, 0, 0)


def test_the_format_can_be_named(project: Project, lead: Any, client_for: Callable) -> None:
    # Given a generic file sent as ProcessBench: every record lacks ProcessBench's label
    job = imported(client_for(lead), project, {"file": upload(GOOD), "format": "processbench"})

    assert job["status"] == "failed"
    assert (job["format_requested"], job["format"]) == ("processbench", "processbench")
    assert [error["line"] for error in job["errors"]] == [1, 2]


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


def test_an_undetectable_format_fails_its_job_with_the_reason(
    project: Project, lead: Any, client_for: Callable
) -> None:
    job = imported(client_for(lead), project, {"file": upload(b'{"colour": "blue"}\n')})

    assert job["status"] == "failed"
    assert "cannot tell the format" in job["detail"]
    assert (job["errors"], job["format"]) == ([], None)
    assert ImportBatch.objects.count() == 0


@pytest.mark.parametrize("limit", [1_000, 10])
def test_an_upload_over_the_limit_is_413(
    project: Project, lead: Any, client_for: Callable, limit: int, import_dir: Path
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
    assert ImportJob.objects.count() == 0
    assert list(import_dir.rglob("*")) == []


def test_an_upload_just_under_the_limit_is_accepted(
    project: Project, lead: Any, client_for: Callable
) -> None:
    with override_settings(STEPLAB_IMPORT_MAX_UPLOAD_BYTES=len(GOOD)):
        response = client_for(lead).post(url(project), {"file": upload(GOOD)}, format="multipart")

    assert response.status_code == 202


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
    assert accepted.status_code == 202
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

    job = imported(client_for(lead), project, {"file": upload(buffer.getvalue(), "big.jsonl")})

    assert job["status"] == "done", job
    assert job["result"]["chains_created"] == chains
    assert (job["records_read"], job["size"]) == (chains, len(buffer.getvalue()))
    assert Step.objects.count() == 3 * chains


def test_the_real_processbench_file_over_http(
    project: Project, lead: Any, client_for: Callable, shared_data: Path
) -> None:
    path = shared_data / "processbench" / "gsm8k.json"

    with path.open("rb") as stream:
        job = imported(client_for(lead), project, {"file": stream})

    assert job["status"] == "done"
    assert (job["format"], job["result"]["chains_created"]) == ("processbench", 400)
    assert (job["records_read"], job["bytes_read"]) == (400, os.path.getsize(path))


def test_the_endpoint_is_in_the_openapi_schema(client_for: Callable) -> None:
    response = client_for(UserFactory()).get("/api/schema/", {"format": "json"})

    paths = response.json()["paths"]
    operation = paths["/api/v1/projects/{project_id}/imports/"]["post"]
    assert "multipart/form-data" in operation["requestBody"]["content"]
    assert {"202", "400", "413"} <= set(operation["responses"])
    polled = paths["/api/v1/projects/{project_id}/imports/{job_id}/"]["get"]
    assert {"200", "404"} <= set(polled["responses"])


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
    job = imported(client_for(lead), project, {"file": upload(json.dumps(record).encode() + b"\n")})
    assert job["status"] == "done", job["detail"]

    # When an annotator leases it and submits a comment at its limit on every step and a
    # rewrite at its limit, every character one that JSON escapes in 6 bytes (\u0001)
    # (the queue answers a token's requests by its token door, a forced login's in DRF)
    member = make_member(project, Role.ANNOTATOR)
    if auth == "token":
        annotator = APIClient()
        annotator.credentials(HTTP_AUTHORIZATION=f"Token {api_token_key(member)}")
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
