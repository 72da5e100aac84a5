"""An upload's import job on a real Celery worker (Redis broker, a worker process against
the test database): sent when its row commits, run by the worker, followed by polling
the API to its counts; a bad file's job ends with its bad lines and nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from annotation.models import Chain, ImportBatch, Role
from tests.annotation.import_worker import import_worker, job_wait  # noqa: F401 - a fixture
from tests.factories import MembershipFactory, ProjectFactory
from tests.prm_training.prm_worker import WorkerHandle

pytestmark = [pytest.mark.redis, pytest.mark.django_db(transaction=True)]


def test_a_worker_imports_an_upload_and_the_job_reports_it(
    import_worker: WorkerHandle,  # noqa: F811 - the fixture
    shared_data: Path,
    import_dir: Path,
) -> None:
    # Given: a lead and a real ProcessBench file
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    client = APIClient()
    client.force_authenticate(user=lead)
    path = shared_data / "processbench" / "gsm8k.json"

    # When: it is uploaded (the job commits with the request, then its task is sent)
    with path.open("rb") as stream:
        queued = client.post(
            f"/api/v1/projects/{project.pk}/imports/", {"file": stream}, format="multipart"
        )
    assert queued.status_code == 202, queued.content
    job = job_wait(client, queued.json()["url"], import_worker, what="import job")

    # Then: the worker imported it, and the job says what it read and wrote
    assert job["status"] == "done", job
    assert (job["format"], job["result"]["chains_created"], job["records_read"]) == (
        "processbench",
        400,
        400,
    )
    assert job["bytes_read"] == path.stat().st_size
    assert Chain.objects.filter(project=project).count() == 400
    assert list(import_dir.rglob("*.upload")) == []
    assert "annotation.import_job" in import_worker.output()


def test_a_worker_rejects_a_bad_upload_with_its_lines(
    import_worker: WorkerHandle,  # noqa: F811 - the fixture
) -> None:
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    client = APIClient()
    client.force_authenticate(user=lead)
    content = b'{"problem": "p", "steps": ["a"]}\n{"problem": "q", "steps": []}\nnot json\n'

    queued = client.post(
        f"/api/v1/projects/{project.pk}/imports/",
        {"file": SimpleUploadedFile("bad.jsonl", content)},
        format="multipart",
    )
    job = job_wait(client, queued.json()["url"], import_worker, what="import job")

    assert job["status"] == "failed", job
    assert [error["line"] for error in job["errors"]] == [2, 3]
    assert (ImportBatch.objects.count(), Chain.objects.count()) == (0, 0)
