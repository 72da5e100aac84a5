"""Every statement of the queue's hot path, pinned: a next and each kind of submit over an
API token, as the workspace and the client send them, with what runs once the
transaction commits (``on_commit`` callbacks, the hooks of a finished chain). A statement
added anywhere on that path, by the queue or by a hook another slice registers, changes a
list below and fails here; the lists say what each statement is for.

Statements are compared by shape (verb and first table), not by text, so rewording one
keeps the pin; ``test_queue_statement_reach.py`` checks what each reads."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from annotation.models import Chain, Webhook, WebhookDelivery, WebhookEvent
from prm_training.services import autostart
from tests.factories import ChainFactory, ProjectFactory, api_token_key

pytestmark = pytest.mark.django_db

_TABLE = re.compile(r'\b(?:FROM|INTO|UPDATE)\s+(?:ONLY\s+)?"?(\w+)"?', re.IGNORECASE)
_PARENTHESES = re.compile(r"\([^()]*\)")

# Every next: the token door's lookup (the token by its hash, with its user, the project
# and the caller's membership: annotation.labeling.queue.access), the caller's claim
# lock, their live leases, the candidate walk, the lease written with its chain, problem
# and steps returned.
NEXT = [
    "SELECT annotation_apitoken",
    "SAVEPOINT",
    "SELECT auth_user",
    "SELECT annotation_assignment",
    "SELECT annotation_chain",
    "WITH annotation_assignment",
    "RELEASE",
]
# Every submit: the token door's lookup (the user by the token's hash), the chain locked
# with its project (and whether it has an active webhook), the lease with the steps and
# any earlier use of the request_id, then every write in one statement (the chain's
# agreement too, once two passes count: queue.sql.CHAIN_COUNTED_AGREEMENT_SQL).
SUBMIT = [
    "SELECT auth_user",
    "SAVEPOINT",
    "SELECT annotation_chain",
    "SELECT annotation_assignment",
    "WITH annotation_annotation",
]
# Once a submit that finishes a chain commits: whether the project retrains automatically,
# read at most every few seconds per process (prm_training.services.autostart).
AUTOSTART = "SELECT prm_training_projecttrainingsettings"


def statement_shape(sql: str) -> str:
    """``SAVEPOINT``, ``RELEASE`` or the statement's verb and first table; a WITH names
    the table its first data-modifying part writes."""
    text = " ".join(sql.split())
    verb = text.split(" ", 1)[0].upper()
    if verb in ("SAVEPOINT", "RELEASE", "ROLLBACK"):
        return verb
    if verb == "WITH":
        match = _TABLE.search(text[text.upper().index("INSERT INTO") :])
    else:
        while _PARENTHESES.search(text):  # the main statement's table, not a subquery's
            text = _PARENTHESES.sub("", text)
        match = _TABLE.search(text)
    return f"{verb} {match.group(1) if match else '?'}"


@pytest.fixture
def statements(django_capture_on_commit_callbacks) -> Callable[[Callable[[], object]], list]:
    """statements(request) -> the shapes of every statement ``request`` ran, callbacks
    run on commit included."""

    def run(request: Callable[[], object]) -> list[str]:
        with CaptureQueriesContext(connection) as captured:
            with django_capture_on_commit_callbacks(execute=True):
                request()
        return [statement_shape(q["sql"]) for q in captured.captured_queries]

    return run


class Lab:
    """A project of overlap 2 with two annotators on token clients, each client's token
    already used once (its use is written at most once a minute)."""

    def __init__(self, make_member) -> None:
        self.project = ProjectFactory(overlap=2)
        self.clients = []
        for _ in range(2):
            key = api_token_key(make_member(self.project))
            client = APIClient()
            client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
            client.get("/api/v1/projects/")
            self.clients.append(client)

    def next(self, who: int) -> dict:
        response = self.clients[who].post(f"/api/v1/projects/{self.project.pk}/assignments/next/")
        assert response.status_code == 200, response.content
        return response.json()

    def submit(self, who: int, lease: dict) -> None:
        body = {
            "ratings": [
                {"step": step["id"], "rating": 1 if who else -1} for step in lease["chain"]["steps"]
            ],
            "request_id": secrets.token_hex(8),
        }
        url = f"/api/v1/assignments/{lease['assignment']['id']}/submit/"
        response = self.clients[who].post(url, body, format="json")
        assert response.status_code == 201, response.content


@pytest.fixture
def lab(make_member) -> Lab:
    lab = Lab(make_member)
    ChainFactory.create_batch(2, project=lab.project, step_count=4)
    return lab


def test_a_next_runs_the_claim_s_statements_only(lab, statements) -> None:
    assert statements(lambda: lab.next(0)) == NEXT


def test_a_first_pass_runs_the_submit_s_statements_only(lab, statements) -> None:
    lease = lab.next(0)

    assert statements(lambda: lab.submit(0, lease)) == [*SUBMIT, "RELEASE"]


def test_a_finishing_pass_adds_only_the_retraining_check(lab, statements) -> None:
    lab.submit(0, lab.next(0))
    lease = lab.next(1)
    autostart._autostart_seen.clear()

    assert statements(lambda: lab.submit(1, lease)) == [*SUBMIT, "RELEASE", AUTOSTART]
    assert Chain.objects.get(project=lab.project, is_finished=True).agreement == 0.0


def test_the_retraining_check_is_read_once_every_few_seconds(lab, statements) -> None:
    lab.submit(0, lab.next(0))
    lease = lab.next(1)
    # this process read the setting a moment ago
    autostart._autostart_seen[lab.project.pk] = (False, time.monotonic())

    assert statements(lambda: lab.submit(1, lease)) == [*SUBMIT, "RELEASE"]


def test_a_project_with_a_webhook_writes_its_outbox_rows_in_the_submit_statement(
    lab, statements
) -> None:
    Webhook.objects.create(
        project=lab.project,
        url="https://hooks.example.org/steplab",
        events=[WebhookEvent.CHAIN_FINISHED],
        secret="s" * 32,
    )
    first = lab.next(0)
    assert statements(lambda: lab.submit(0, first)) == [*SUBMIT, "RELEASE"]
    lease = lab.next(1)
    autostart._autostart_seen.clear()

    # The outbox rows ride in the submit's one statement (``sql.CHAIN_FINISHED_HOOKS_SQL``),
    # where a gold pass shaped as this one runs the same statement and writes none
    assert statements(lambda: lab.submit(1, lease)) == [*SUBMIT, "RELEASE", AUTOSTART]
    assert WebhookDelivery.objects.filter(webhook__project=lab.project).count() == 1
