"""Putting chains into an evaluation set, and taking them out, from the data manager over
HTTP: counted, confirmed and done by a real Celery worker (Redis broker); leads only
(ML staff and annotators 403, non-members 404, nothing queued); the set checked."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from annotation.datasets.evaluation_sets import evaluation_set_mark_chains
from annotation.models import BulkAction, Chain, Role
from annotation.quality.gold import gold_mark
from tests.annotation.import_worker import import_worker, job_wait  # noqa: F401 - a fixture
from tests.factories import (
    ChainFactory,
    MembershipFactory,
    ProjectFactory,
    UserFactory,
    annotation_with_ratings,
)
from tests.prm_training.prm_worker import WorkerHandle


def _client(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user=user)
    return client


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_worker_puts_the_flagged_chains_into_a_set_and_takes_them_out(
    import_worker: WorkerHandle,  # noqa: F811 - the fixture
) -> None:
    # Given: a set of one chain, three flagged chains, one of them gold, and two others
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    client = _client(lead)
    first = ChainFactory(project=project)
    held = evaluation_set_mark_chains(project=project, chain_ids=[first.pk], name="unseen")
    flagged = [ChainFactory(project=project, is_flagged=True) for _ in range(3)]
    annotation_with_ratings(chain=flagged[0], labels=[1, 1, -1])
    gold_mark(project=project, chain_ids=[flagged[0].pk])
    [ChainFactory(project=project) for _ in range(2)]
    base = f"/api/v1/projects/{project.pk}/chains/bulk/"
    body: dict[str, Any] = {
        "action": "evaluation_add",
        "evaluation_set": held.pk,
        "filters": {"status": ["flagged"]},
    }

    # When: the lead counts, confirms, and the worker does it
    preview = client.post(f"{base}preview/", body, format="json")
    queued = client.post(base, {**body, "expected": 2}, format="json")
    assert queued.status_code == 202, queued.content
    job = job_wait(client, queued.json()["url"], import_worker, what="bulk action")

    # Then: the two flagged chains that are not gold are in the set, and say so
    assert preview.json() == {
        "matched": 3,
        "changed": 2,
        "unchanged": [
            {"reason": "gold (gold chains measure annotators and are leased)", "count": 1}
        ],
    }
    assert (job["status"], job["action"], job["changed"]) == ("done", "evaluation_add", 2)
    assert set(held.chains.values_list("pk", flat=True)) == {first.pk} | {c.pk for c in flagged[1:]}
    (listed,) = client.get(f"/api/v1/projects/{project.pk}/evaluation-sets/").json()
    assert listed["chains"] == 3
    (event,) = client.get(f"/api/v1/chains/{flagged[1].pk}/").json()["events"]
    assert (event["kind"], event["summary"], event["actor"], event["bulk_action"]) == (
        "evaluation_added",
        "Put into an evaluation set",
        lead.username,
        job["id"],
    )
    assert event["detail"] == {"evaluation_set": held.pk, "name": "unseen"}

    # When: the lead takes the ticked chains out again
    out = {"action": "evaluation_remove", "evaluation_set": held.pk, "chain_ids": [first.pk]}
    queued = client.post(base, {**out, "expected": 1}, format="json")
    job = job_wait(client, queued.json()["url"], import_worker, what="bulk action")

    # Then: that chain is ordinary work again, and its history says so
    assert (job["status"], job["changed"]) == ("done", 1)
    assert Chain.objects.get(pk=first.pk).evaluation_set_id is None
    events = client.get(f"/api/v1/chains/{first.pk}/").json()["events"]
    assert [e["kind"] for e in events] == ["evaluation_removed"]


@pytest.mark.django_db
def test_only_leads_may_and_the_set_must_be_the_project_s() -> None:
    # Given: a project with a set, its members of each role, and another project's set
    project = ProjectFactory()
    chain = ChainFactory(project=project)
    held = evaluation_set_mark_chains(
        project=project, chain_ids=[ChainFactory(project=project).pk], name="held"
    )
    elsewhere = ProjectFactory()
    theirs = evaluation_set_mark_chains(
        project=elsewhere, chain_ids=[ChainFactory(project=elsewhere).pk], name="theirs"
    )
    base = f"/api/v1/projects/{project.pk}/chains/bulk/"
    body = {"action": "evaluation_add", "evaluation_set": held.pk, "chain_ids": [chain.pk]}
    callers = {
        role: _client(MembershipFactory(project=project, role=role).user)
        for role in (Role.ML, Role.ANNOTATOR)
    }
    callers["stranger"] = _client(UserFactory())

    # When / then: ML staff and annotators are refused, strangers do not see the project
    for caller, expected in ((Role.ML, 403), (Role.ANNOTATOR, 403), ("stranger", 404)):
        client = callers[caller]
        assert client.post(f"{base}preview/", body, format="json").status_code == expected
        assert client.post(base, {**body, "expected": 1}, format="json").status_code == expected
    assert not BulkAction.objects.exists()
    assert Chain.objects.get(pk=chain.pk).evaluation_set_id is None

    # And a lead's bad bodies are 400s naming the field, with nothing queued
    lead = _client(MembershipFactory(project=project, role=Role.LEAD).user)

    def refused(sent: dict[str, Any]) -> tuple[int, set[str]]:
        answer = lead.post(f"{base}preview/", sent, format="json")
        return answer.status_code, set(answer.json()) if answer.status_code == 400 else set()

    assert refused({**body, "evaluation_set": theirs.pk}) == (400, {"evaluation_set"})
    assert refused({**body, "action": "evaluation_remove", "evaluation_set": theirs.pk}) == (
        400,
        {"evaluation_set"},
    )
    assert refused({"action": "evaluation_add", "chain_ids": [chain.pk]}) == (
        400,
        {"evaluation_set"},
    )
    assert refused({**body, "evaluation_set": "held"}) == (400, {"evaluation_set"})
    assert refused({**body, "action": "unflag"}) == (400, {"evaluation_set"})
    created = lead.post(base, {**body, "evaluation_set": theirs.pk, "expected": 1}, format="json")
    assert (created.status_code, set(created.json())) == (400, {"evaluation_set"})
    assert not BulkAction.objects.exists()
    assert lead.post(f"{base}preview/", body, format="json").json() == {
        "matched": 1,
        "changed": 1,
        "unchanged": [],
    }
