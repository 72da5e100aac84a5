"""The data manager's bulk actions over HTTP: count, confirm, and a real Celery worker
doing it (Redis broker, a worker process against the test database); the chain's history
in its detail; bad bodies refused; a chain's reviewer."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from annotation.models import Chain, Role
from tests.annotation.import_worker import import_worker, job_wait  # noqa: F401 - a fixture
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory
from tests.prm_training.prm_worker import WorkerHandle


def _lead_client(project: Any) -> tuple[APIClient, Any]:
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    client = APIClient()
    client.force_authenticate(user=lead)
    return client, lead


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_worker_requeues_every_finished_chain_and_each_chain_records_it(
    import_worker: WorkerHandle,  # noqa: F811 - the fixture
) -> None:
    # Given: five finished chains and two unfinished
    project = ProjectFactory(overlap=1)
    client, lead = _lead_client(project)
    finished = [ChainFactory(project=project, finished_count=1, is_finished=True) for _ in range(5)]
    [ChainFactory(project=project) for _ in range(2)]
    base = f"/api/v1/projects/{project.pk}/chains/bulk/"
    body: dict[str, Any] = {"action": "requeue", "filters": {"status": ["finished"]}}

    # When: the lead counts, confirms, and the worker does it
    preview = client.post(f"{base}preview/", body, format="json")
    assert preview.status_code == 200, preview.content
    assert preview.json() == {"matched": 5, "changed": 5, "unchanged": []}
    queued = client.post(base, {**body, "expected": 5}, format="json")
    assert queued.status_code == 202, queued.content
    job = job_wait(client, queued.json()["url"], import_worker, what="bulk action")

    # Then: every finished chain asks for one more pass, and says so in its history
    assert (job["status"], job["matched"], job["changed"], job["expected"]) == ("done", 5, 5, 5)
    assert not Chain.objects.filter(project=project, is_finished=True).exists()
    detail = client.get(f"/api/v1/chains/{finished[1].pk}/").json()
    assert detail["needed"] == 2
    (event,) = detail["events"]
    assert (event["kind"], event["actor"], event["bulk_action"]) == (
        "requeued",
        lead.username,
        job["id"],
    )
    assert (event["summary"], event["detail"], detail["event_count"]) == (
        "Requeued",
        {"more": 1, "needed": 2},
        1,
    )


@pytest.mark.django_db
def test_bad_bodies_are_refused_and_nothing_is_queued() -> None:
    project = ProjectFactory()
    client, _lead = _lead_client(project)
    annotator = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    mine = ChainFactory(project=project).pk
    theirs = ChainFactory().pk
    url = f"/api/v1/projects/{project.pk}/chains/bulk/preview/"

    def status_of(body: dict[str, Any]) -> tuple[int, set[str]]:
        answer = client.post(url, body, format="json")
        return answer.status_code, set(answer.json()) if answer.status_code == 400 else set()

    assert status_of({"action": "unflag"}) == (400, {"chain_ids"})
    assert status_of({"action": "unflag", "chain_ids": [mine], "filters": {}}) == (
        400,
        {"chain_ids"},
    )
    assert status_of({"action": "unflag", "chain_ids": [mine, theirs]}) == (400, {"chain_ids"})
    assert status_of({"action": "delete", "chain_ids": [mine]}) == (400, {"action"})
    assert status_of({"action": "requeue", "chain_ids": [mine], "more": 0}) == (400, {"more"})
    assert status_of({"action": "reviewer", "chain_ids": [mine], "reviewer": annotator.pk}) == (
        400,
        {"reviewer"},
    )
    assert status_of({"action": "unflag", "filters": {"status": ["nonsense"]}}) == (
        400,
        {"filters"},
    )
    assert status_of({"action": "unflag", "chain_ids": list(range(1, 1002))})[0] == 400
    created = client.post(
        f"/api/v1/projects/{project.pk}/chains/bulk/",
        {"action": "unflag", "chain_ids": [mine]},
        format="json",
    )
    assert (created.status_code, set(created.json())) == (400, {"expected"})
    assert client.post(url, {"action": "unflag", "chain_ids": [mine]}, format="json").json() == {
        "matched": 1,
        "changed": 0,
        "unchanged": [{"reason": "not flagged", "count": 1}],
    }


@pytest.mark.django_db
def test_a_chain_s_reviewer_is_set_shown_and_filtered_on() -> None:
    project = ProjectFactory()
    client, lead = _lead_client(project)
    annotator = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    chain, other = ChainFactory(project=project), ChainFactory(project=project)
    url = f"/api/v1/chains/{chain.pk}/reviewer/"

    assert client.post(url, {"reviewer": annotator.pk}, format="json").status_code == 400
    named = client.post(url, {"reviewer": lead.pk}, format="json")

    assert named.status_code == 200
    assert named.json()["reviewer"] == lead.username
    assert named.json()["events"][0]["detail"] == {"reviewer": lead.username}
    listed = client.get(f"/api/v1/projects/{project.pk}/chains/", {"reviewer": lead.pk}).json()
    assert [row["id"] for row in listed["results"]] == [chain.pk]
    assert listed["results"][0]["reviewer"] == lead.username
    everyone = client.get(f"/api/v1/projects/{project.pk}/chains/").json()["results"]
    assert {row["id"]: row["reviewer"] for row in everyone} == {
        chain.pk: lead.username,
        other.pk: None,
    }
    assert client.post(url, {"reviewer": None}, format="json").json()["reviewer"] is None
