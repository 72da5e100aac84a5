"""Leases under real time and real HTTP (issue #6, reliability: leases).

Over loopback against Django's live server, with real clocks rather than rewound expiry
times: two tabs of one annotator asking at the same moment share one lease; a lease
abandoned with a 2 s expiry goes to the next annotator no earlier than its expiry and
within one second after it; the first holder's late submit is then a 409 that takes
nothing from the new holder, whose own submit is stored as sent.

The queue's rules themselves are pinned in tests/annotation/labeling/test_queue_*.py with rewound
clocks; these tests check the same promises end to end, where a stale read, a missing
lock or a cached answer would show.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import pytest
from django.utils import timezone

from annotation.models import (
    Annotation,
    AnnotationSource,
    Assignment,
    AssignmentStatus,
    StepRating,
)
from annotation.public_ids import ASSIGNMENT_IDS, CHAIN_IDS
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory, api_token_key

pytestmark = pytest.mark.django_db(transaction=True)

LEASE_SECONDS = 2.0
# How often the second annotator asks for work while the first one's lease runs out: a
# tenth of the one-second allowance, so polling adds at most 0.1 s to the measured delay.
POLL_SECONDS = 0.1


class Tab:
    """One browser tab of one annotator: its own connection, the annotator's token."""

    def __init__(self, base_url: str, token: str) -> None:
        parts = urlsplit(base_url)
        self.token = token
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.headers = {
            "Authorization": f"Token {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }

    def post(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            data = json.dumps(body).encode() if body is not None else b""
            conn.request("POST", path, body=data, headers=self.headers)
            response = conn.getresponse()
            payload = response.read()
        finally:
            conn.close()
        return response.status, json.loads(payload) if payload else None

    def next(self, project_id: int) -> tuple[int, Any]:
        return self.post(f"/api/v1/projects/{project_id}/assignments/next/")

    def submit(self, lease: dict[str, Any], rating: int) -> tuple[int, Any]:
        ratings = [{"step": step["id"], "rating": rating} for step in lease["chain"]["steps"]]
        return self.post(
            f"/api/v1/assignments/{lease['assignment']['id']}/submit/", {"ratings": ratings}
        )


def _annotator_tab(live_server: Any, project: Any) -> tuple[Any, Tab]:
    user = MembershipFactory(project=project, role="annotator").user
    return user, Tab(live_server.url, api_token_key(user))


def test_two_tabs_of_one_annotator_asking_at_once_get_the_same_lease(live_server) -> None:
    # Given an annotator with two tabs open on a project with work for them
    project = ProjectFactory(overlap=2)
    for _ in range(3):
        ChainFactory(project=project)
    user, first_tab = _annotator_tab(live_server, project)
    second_tab = Tab(live_server.url, first_tab.token)

    # When both tabs press "next" at the same moment
    barrier = threading.Barrier(2)
    answers: list[tuple[int, Any]] = []

    def press(tab: Tab) -> None:
        barrier.wait()
        answers.append(tab.next(project.pk))

    threads = [threading.Thread(target=press, args=(tab,)) for tab in (first_tab, second_tab)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    # Then both get the very same lease of the same chain, and only one lease exists
    assert [status for status, _ in answers] == [200, 200]
    (_, one), (_, other) = answers
    assert one["assignment"]["id"] == other["assignment"]["id"]
    assert one["chain"]["id"] == other["chain"]["id"]
    assert Assignment.objects.filter(annotator=user).count() == 1


def test_an_abandoned_lease_is_reissued_within_a_second_and_the_late_submit_is_409(
    live_server,
) -> None:
    # Given one chain (overlap 1) leased by a first annotator, whose lease is set to
    # run out 2 s from now, and a second annotator with nothing else to do
    project = ProjectFactory(overlap=1)
    chain = ChainFactory(project=project)
    first, first_tab = _annotator_tab(live_server, project)
    second, second_tab = _annotator_tab(live_server, project)
    status, abandoned = first_tab.next(project.pk)
    assert status == 200
    expires_at = timezone.now() + timedelta(seconds=LEASE_SECONDS)
    Assignment.objects.filter(
        pk=ASSIGNMENT_IDS.read(abandoned["assignment"]["id"], viewer=None)
    ).update(expires_at=expires_at)

    # When the second annotator keeps asking for work
    answers_before_expiry = []
    deadline = time.monotonic() + LEASE_SECONDS + 5
    reissued = None
    while time.monotonic() < deadline:
        asked_at = timezone.now()
        status, body = second_tab.next(project.pk)
        if status == 200:
            reissued = body
            break
        assert status == 204, body
        answers_before_expiry.append(asked_at)
        time.sleep(POLL_SECONDS)

    # Then the chain was refused while the lease ran, and handed over no earlier than its
    # expiry and at most one second after it
    assert reissued is not None, "the abandoned lease was never reissued"
    assert answers_before_expiry, "the second annotator never asked before the expiry"
    assert answers_before_expiry[0] < expires_at
    assert reissued["chain"]["id"] == CHAIN_IDS.show(chain.pk, viewer=second.pk)
    assert reissued["assignment"]["id"] != abandoned["assignment"]["id"]
    # (timed by the server, which stamps the new lease: a slow answer on a busy machine
    # is not a late reissue)
    issued_at = Assignment.objects.get(
        pk=ASSIGNMENT_IDS.read(reissued["assignment"]["id"], viewer=None)
    ).created_at
    assert issued_at >= expires_at
    assert issued_at - expires_at <= timedelta(seconds=1)

    # When the first annotator comes back and submits the abandoned lease
    status, conflict = first_tab.submit(abandoned, rating=-1)

    # Then it is a 409 "lease lost", nothing of theirs is stored, and the second
    # annotator's lease is untouched
    assert status == 409, conflict
    assert conflict["code"] == "lease_lost"
    assert not Annotation.objects.filter(annotator=first).exists()
    held = Assignment.objects.get(pk=ASSIGNMENT_IDS.read(reissued["assignment"]["id"], viewer=None))
    assert held.annotator == second
    assert held.status == AssignmentStatus.ACTIVE
    assert held.expires_at > timezone.now()

    # And the new holder's submit is stored exactly as sent, the chain's only human pass
    status, created = second_tab.submit(reissued, rating=1)
    assert status == 201, created
    stored = Annotation.objects.get(chain=chain, source=AnnotationSource.HUMAN)
    assert stored.annotator == second
    ratings = StepRating.objects.filter(annotation=stored).values_list("rating", flat=True)
    assert list(ratings) == [1] * len(reissued["chain"]["steps"])

    # And a second try of the late submit is still refused and still changes nothing
    status, _ = first_tab.submit(abandoned, rating=-1)
    assert status == 409
    assert Annotation.objects.filter(chain=chain).count() == 1
