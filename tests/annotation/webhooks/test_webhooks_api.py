"""The webhooks API: only the project's leads (annotators and ML staff 403, anyone outside
404), unknown fields refused, a refused URL or event a 400 naming its field, the secret in
Standard Webhooks form, the delivery log paged newest first, a test event and a replay."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient
from standardwebhooks import Webhook as Verifier

from annotation.models import Role, Webhook, WebhookDelivery
from tests.factories import MembershipFactory, ProjectFactory

pytestmark = pytest.mark.django_db

URL = "http://127.0.0.1:9/receiver"


def _client(user: Any) -> APIClient:
    client = APIClient()
    client.force_authenticate(user=user)
    return client


@pytest.fixture
def lab() -> dict[str, Any]:
    project = ProjectFactory()
    people = {
        role: MembershipFactory(project=project, role=role).user
        for role in (Role.LEAD, Role.ANNOTATOR, Role.ML)
    }
    people["outsider"] = MembershipFactory(project=ProjectFactory(), role=Role.LEAD).user
    return {"project": project, **people}


def _base(project: Any) -> str:
    return f"/api/v1/projects/{project.pk}/webhooks/"


def test_a_lead_adds_reads_changes_and_deletes_a_webhook(lab: dict[str, Any]) -> None:
    lead = _client(lab[Role.LEAD])
    base = _base(lab["project"])

    made = lead.post(
        base,
        {"url": URL, "events": ["snapshot.created", "chain.finished"], "description": "nightly"},
    )
    assert made.status_code == 201, made.content
    hook = made.json()
    assert hook["events"] == ["chain.finished", "snapshot.created"]  # the table's order
    assert hook["secret"].startswith("whsec_")
    Verifier(hook["secret"])  # a secret the library reads
    assert hook["active"] is True and hook["created_by"] == lab[Role.LEAD].username

    assert [h["id"] for h in lead.get(base).json()] == [hook["id"]]
    changed = lead.patch(f"{base}{hook['id']}/", {"active": False, "rotate_secret": True})
    assert changed.status_code == 200
    assert changed.json()["active"] is False
    assert changed.json()["secret"] != hook["secret"]

    assert lead.delete(f"{base}{hook['id']}/").status_code == 204
    assert not Webhook.objects.exists()
    assert lead.get(f"{base}{hook['id']}/").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": URL, "events": ["snapshot.created"], "secret": "whsec_x"}, "secret"),
        ({"url": URL, "events": ["snapshot.created"], "evnts": []}, "evnts"),
        ({"url": URL, "events": ["chain.deleted"]}, "events"),
        ({"url": URL, "events": []}, "events"),
        ({"url": "ftp://example.org/", "events": ["snapshot.created"]}, "url"),
        ({"url": "not a url", "events": ["snapshot.created"]}, "url"),
    ],
)
def test_bad_bodies_are_a_400_naming_the_field(
    lab: dict[str, Any], body: dict[str, Any], field: str
) -> None:
    answer = _client(lab[Role.LEAD]).post(_base(lab["project"]), body)
    assert answer.status_code == 400
    assert field in answer.json()


def test_a_private_url_is_a_400_when_not_allowed(lab: dict[str, Any], settings: Any) -> None:
    settings.STEPLAB_WEBHOOK_ALLOW_PRIVATE = False
    answer = _client(lab[Role.LEAD]).post(
        _base(lab["project"]), {"url": URL, "events": ["snapshot.created"]}
    )
    assert answer.status_code == 400
    assert "private" in " ".join(answer.json()["url"])


@pytest.mark.parametrize(
    ("who", "status"), [(Role.ANNOTATOR, 403), (Role.ML, 403), ("outsider", 404)]
)
def test_only_leads_see_or_touch_webhooks(lab: dict[str, Any], who: str, status: int) -> None:
    lead = _client(lab[Role.LEAD])
    base = _base(lab["project"])
    hook = lead.post(base, {"url": URL, "events": ["snapshot.created"]}).json()
    delivery = lead.post(f"{base}{hook['id']}/test/", {}).json()
    caller = _client(lab[who])

    answers = [
        caller.get(base),
        caller.post(base, {"url": URL, "events": ["snapshot.created"]}),
        caller.get(f"{base}{hook['id']}/"),
        caller.patch(f"{base}{hook['id']}/", {"active": False}),
        caller.delete(f"{base}{hook['id']}/"),
        caller.post(f"{base}{hook['id']}/test/", {}),
        caller.get(f"{base}{hook['id']}/deliveries/"),
        caller.post(f"{base}{hook['id']}/deliveries/{delivery['id']}/replay/", {}),
    ]

    assert [a.status_code for a in answers] == [status] * len(answers)
    assert "secret" not in str([a.content for a in answers])
    assert Webhook.objects.filter(active=True).count() == 1
    assert WebhookDelivery.objects.count() == 1


def test_another_projects_webhook_is_a_404_for_a_lead(lab: dict[str, Any]) -> None:
    other = _client(lab["outsider"])
    other_project = lab["outsider"].memberships.get().project
    theirs = other.post(_base(other_project), {"url": URL, "events": ["snapshot.created"]})
    lead = _client(lab[Role.LEAD])

    url = f"{_base(lab['project'])}{theirs.json()['id']}/"
    assert lead.get(url).status_code == 404
    assert lead.post(f"{url}test/", {}).status_code == 404


def test_the_test_event_and_the_log_paged_newest_first_and_a_replay(lab: dict[str, Any]) -> None:
    lead = _client(lab[Role.LEAD])
    base = _base(lab["project"])
    hook = lead.post(base, {"url": URL, "events": ["snapshot.created"]}).json()
    for _ in range(55):
        sent = lead.post(f"{base}{hook['id']}/test/", {})
        assert sent.status_code == 202
    assert sent.json()["event"] == "webhook.test"
    assert sent.json()["payload"]["data"] == {"project": lab["project"].pk, "webhook": hook["id"]}
    assert lead.post(f"{base}{hook['id']}/test/", {"now": True}).status_code == 400

    first = lead.get(f"{base}{hook['id']}/deliveries/").json()
    second = lead.get(f"{base}{hook['id']}/deliveries/?page=2").json()
    assert first["count"] == 55 and len(first["results"]) == 50 and len(second["results"]) == 5
    ids = [d["id"] for d in first["results"] + second["results"]]
    assert ids == sorted(ids, reverse=True)

    oldest = second["results"][-1]
    replay = lead.post(f"{base}{hook['id']}/deliveries/{oldest['id']}/replay/", {})
    assert replay.status_code == 202
    assert replay.json()["replay_of"] == oldest["id"]
    assert replay.json()["message_id"] == oldest["message_id"]
    assert lead.post(f"{base}{hook['id']}/deliveries/999999/replay/", {}).status_code == 404
