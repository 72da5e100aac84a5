"""Snapshot and export endpoints: who may do what, and what comes back."""

from __future__ import annotations

import io
import json

import pyarrow.parquet as pq
import pytest
from django.urls import reverse
from django.utils.text import slugify

from annotation.models import Snapshot
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


@pytest.fixture
def labeled_project(project):
    for labels in ([1, 0, -1], [1, 1, 1], [-1, None, None]):
        # Finished (overlap 1): written directly, as the queue would have left them.
        chain = ChainFactory(project=project, step_count=3, finished_count=1, is_finished=True)
        annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=labels)
    return project


def _snapshots_url(project) -> str:
    return reverse("api-project-snapshots", args=[project.pk])


def _export_url(project) -> str:
    return reverse("api-project-export", args=[project.pk])


def _body(response) -> bytes:
    if getattr(response, "streaming", False):
        return b"".join(response.streaming_content)
    return response.content


@pytest.mark.parametrize(
    ("role", "list_status", "create_status", "export_status"),
    [
        ("annotator", 403, 403, 403),
        ("ml", 200, 403, 403),
        ("lead", 200, 201, 200),
        (None, 404, 404, 404),
    ],
)
def test_access_rules(
    labeled_project, make_member, client_for, role, list_status, create_status, export_status
):
    project = labeled_project
    Snapshot.objects.filter(project=project).delete()
    lead = make_member(project, "lead")
    client_for(lead).post(_snapshots_url(project), {}, format="json")
    user = make_member(project, role) if role else UserFactory()
    client = client_for(user)

    assert client.get(_snapshots_url(project)).status_code == list_status
    assert client.post(_snapshots_url(project), {}, format="json").status_code == create_status
    response = client.get(_export_url(project), {"format": "trl"})
    assert response.status_code == export_status
    if export_status != 200:
        assert b"prompt" not in _body(response)


def test_anonymous_is_refused(labeled_project, api_client):
    assert api_client.get(_export_url(labeled_project), {"format": "csv"}).status_code == 401


def test_lead_creates_and_lists_snapshots(labeled_project, make_member, client_for):
    lead = make_member(labeled_project, "lead")
    client = client_for(lead)

    created = client.post(
        _snapshots_url(labeled_project),
        {"heldout_fraction": 0.0, "seed": 5, "ambiguous": "negative"},
        format="json",
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["version"] == 1
    assert body["created_by"] == lead.username
    assert body["counts"]["chains"] == 3
    assert body["counts"]["label_counts"] == {"-1": 2, "0": 1, "1": 4}
    assert body["meta"]["trl_ambiguous"] == "negative"

    client.post(_snapshots_url(labeled_project), {}, format="json")
    listed = client.get(_snapshots_url(labeled_project)).json()
    assert [item["version"] for item in listed["results"]] == [2, 1]
    assert listed["results"][0]["content_hash"] != ""

    bad = client.post(_snapshots_url(labeled_project), {"ambiguous": "maybe"}, format="json")
    assert bad.status_code == 400 and "ambiguous" in bad.json()


def test_snapshot_of_an_unlabeled_project_is_a_400(project, make_member, client_for):
    ChainFactory(project=project)
    client = client_for(make_member(project, "lead"))
    response = client.post(_snapshots_url(project), {}, format="json")
    assert response.status_code == 400
    assert "no labeled step" in json.dumps(response.json())


@pytest.mark.parametrize(
    ("fmt", "content_type", "records"),
    [
        ("prm800k", "application/x-ndjson", 3),
        ("trl", "application/x-ndjson", 3),  # drop cuts [1, 0, -1] to one step
        ("processbench", "application/x-ndjson", 3),
        ("csv", "text/csv", 10),  # header + 9 steps
    ],
)
def test_export_streams_each_text_format(
    labeled_project, make_member, client_for, fmt, content_type, records
):
    client = client_for(make_member(labeled_project, "lead"))
    client.post(_snapshots_url(labeled_project), {}, format="json")

    response = client.get(_export_url(labeled_project), {"format": fmt})

    assert response.status_code == 200
    assert response.streaming
    assert response["Content-Type"].startswith(content_type)
    assert response["X-Steplab-Snapshot"] == "1"
    assert response["X-Steplab-Ambiguous"] == "drop"
    slug = slugify(labeled_project.name)
    name = f"{slug}-v1-all.csv" if fmt == "csv" else f"{slug}-v1-all.{fmt}.jsonl"
    assert response["Content-Disposition"] == f'attachment; filename="{name}"'
    lines = _body(response).decode("utf-8").splitlines()
    assert len(lines) == records
    if fmt != "csv":
        assert all(json.loads(line) for line in lines)


def test_export_parquet_and_overrides(labeled_project, make_member, client_for):
    client = client_for(make_member(labeled_project, "lead"))
    client.post(_snapshots_url(labeled_project), {"heldout_fraction": 0.0}, format="json")

    response = client.get(
        _export_url(labeled_project),
        {"format": "parquet", "snapshot": 1, "ambiguous": "positive", "split": "train"},
    )

    assert response.status_code == 200
    assert response["X-Steplab-Ambiguous"] == "positive"
    assert response["Content-Disposition"] == (
        f'attachment; filename="{slugify(labeled_project.name)}-v1-train.parquet"'
    )
    table = pq.read_table(io.BytesIO(_body(response)))
    assert table.num_rows == 3
    assert sorted(row["labels"] for row in table.to_pylist()) == [
        [False],
        [True, True, False],
        [True, True, True],
    ]


def test_export_bad_parameters(labeled_project, make_member, client_for):
    client = client_for(make_member(labeled_project, "lead"))
    assert client.get(_export_url(labeled_project), {"format": "trl"}).status_code == 404
    client.post(_snapshots_url(labeled_project), {}, format="json")
    assert client.get(_export_url(labeled_project), {"format": "xml"}).status_code == 400
    assert client.get(_export_url(labeled_project)).status_code == 400
    missing = client.get(_export_url(labeled_project), {"format": "trl", "snapshot": 7})
    assert missing.status_code == 404
    bad_split = client.get(_export_url(labeled_project), {"format": "csv", "split": "dev"})
    assert bad_split.status_code == 400


def test_a_check_answers_what_the_export_would_without_a_file(
    labeled_project, make_member, client_for
):
    # Given a snapshot with people's labels and no Monte-Carlo values
    client = client_for(make_member(labeled_project, "lead"))
    client.post(_snapshots_url(labeled_project), {}, format="json")
    url = _export_url(labeled_project)

    # Then a format that can start answers 204 with no body, one that cannot its error
    fine = client.get(url, {"format": "csv", "check": "true"})
    assert fine.status_code == 204 and _body(fine) == b""
    refused = client.get(url, {"format": "math_shepherd", "check": "true"})
    assert refused.status_code == 400 and "monte_carlo" in refused.content.decode()
    assert client.get(url, {"format": "csv", "snapshot": 9, "check": "true"}).status_code == 404


@pytest.mark.parametrize(
    ("name", "fmt", "split", "want"),
    [
        (
            "Algebra PRM, round 3",
            "processbench",
            "heldout",
            "algebra-prm-round-3-v1-heldout.processbench.jsonl",
        ),
        ("Ωμέγα", "csv", None, "project{pk}-v1-all.csv"),
        ('x"; filename=evil.sh', "trl", "train", "x-filenameevilsh-v1-train.trl.jsonl"),
    ],
)
def test_an_export_is_named_by_project_version_split_and_format(
    labeled_project, make_member, client_for, name, fmt, split, want
):
    labeled_project.name = name
    labeled_project.save(update_fields=["name"])
    client = client_for(make_member(labeled_project, "lead"))
    client.post(_snapshots_url(labeled_project), {"heldout_fraction": 0.5}, format="json")

    params = {"format": fmt, "snapshot": 1, **({"split": split} if split else {})}
    response = client.get(_export_url(labeled_project), params)

    assert response.status_code == 200
    want = want.format(pk=labeled_project.pk)
    assert response["Content-Disposition"] == f'attachment; filename="{want}"'
