"""``steplab webhooks`` against a live server: a lead adds a webhook, lists, shows,
pauses it and rotates its secret, sends a test event, reads the delivery log and replays
a delivery, then deletes it; an annotator is refused with the server's status. No worker
runs (``no_worker``): deliveries stay pending, which is what a replay acts on."""

from __future__ import annotations

from typing import Any

import pytest

from annotation.models import Role, Webhook, WebhookDelivery
from tests.client.conftest import Steplab
from tests.factories import MembershipFactory, ProjectFactory, api_token_key

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_lead_runs_webhooks_from_the_command_line(steplab: Steplab, no_worker: Any) -> None:
    # Given: a project with its lead, holding a token
    project = ProjectFactory(name="Hooks")
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    token = api_token_key(lead)
    pid = str(project.pk)

    # When: the lead adds a webhook for two events
    created = steplab(
        token, "webhooks", "create", "Hooks", "http://127.0.0.1:9/hook",
        "--event", "chain.finished", "--event", "snapshot.created", "--description", "ci",
        "--json",
    )  # fmt: skip
    assert created.code == 0, created.err
    hook = Webhook.objects.get(project=project)
    assert created.json()["id"] == hook.pk and created.json()["secret"].startswith("whsec_")
    assert hook.events == ["chain.finished", "snapshot.created"] and hook.active
    wid = str(hook.pk)

    # Then: it lists and shows
    listed = steplab(token, "webhooks", "list", pid)
    assert listed.code == 0 and "http://127.0.0.1:9/hook" in listed.out, listed.err
    assert "whsec_" not in listed.out  # the table leaves the secret out
    assert steplab(token, "webhooks", "show", pid, wid, "--json").json()["description"] == "ci"

    # ...pauses it and rotates its secret, then points it elsewhere for one event
    old_secret = hook.secret
    paused = steplab(token, "webhooks", "update", pid, wid, "--paused", "--rotate-secret", "--json")
    assert paused.code == 0, paused.err
    hook.refresh_from_db()
    assert not hook.active and hook.secret != old_secret
    assert paused.json()["secret"] == hook.secret
    moved = steplab(
        token, "webhooks", "update", pid, wid, "--to", "http://127.0.0.1:9/other",
        "--event", "import.failed", "--active", "--json",
    )  # fmt: skip
    assert moved.code == 0, moved.err
    hook.refresh_from_db()
    assert (hook.url, hook.events, hook.active) == (
        "http://127.0.0.1:9/other",
        ["import.failed"],
        True,
    )

    # ...sends a test event, reads the log and replays the delivery
    sent = steplab(token, "webhooks", "test", pid, wid, "--json")
    assert sent.code == 0, sent.err
    assert (sent.json()["event"], sent.json()["status"]) == ("webhook.test", "pending")
    first = sent.json()["id"]
    replayed = steplab(token, "webhooks", "replay", pid, wid, str(first), "--json")
    assert replayed.code == 0, replayed.err
    assert replayed.json()["replay_of"] == first
    assert replayed.json()["message_id"] == sent.json()["message_id"]
    log = steplab(token, "webhooks", "deliveries", pid, wid, "--json")
    assert [row["id"] for row in log.json()] == [replayed.json()["id"], first]
    table = steplab(token, "webhooks", "deliveries", pid, wid)
    assert table.code == 0 and "webhook.test" in table.out

    # ...and deletes it with its log
    assert steplab(token, "webhooks", "delete", pid, wid).code == 0
    assert not Webhook.objects.filter(pk=hook.pk).exists()
    assert not WebhookDelivery.objects.filter(pk=first).exists()


def test_an_annotator_is_refused_and_a_bad_event_never_leaves(steplab: Steplab) -> None:
    project = ProjectFactory(name="Hooks")
    annotator = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    token = api_token_key(annotator)
    refused = steplab(token, "webhooks", "list", str(project.pk))
    assert refused.code == 1 and "HTTP 403" in refused.err
    with pytest.raises(SystemExit) as usage:
        steplab(token, "webhooks", "create", "Hooks", "http://x/", "--event", "chain.done")
    assert usage.value.code == 2
    assert not Webhook.objects.exists()
