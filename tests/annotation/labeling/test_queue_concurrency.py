"""The queue's invariants under many concurrent clients on real PostgreSQL.

Each thread is one annotator with its own database connection. A barrier starts every
round together, so all of them claim at the same instant, while a monitor thread keeps
checking, in single-statement snapshots, that no chain ever holds more live leases plus
finished annotations than its overlap (invariant 2) and that every annotation is counted."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.labeling.queue.errors import LeaseLost
from annotation.labeling.queue.leases import assignment_skip
from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.labeling.workspace import FLAG_REASON_PREFIX
from annotation.models import (
    Annotation,
    AnnotationSource,
    Assignment,
    AssignmentStatus,
    Chain,
    Project,
)
from annotation.public_ids import ASSIGNMENT_IDS, STEP_IDS
from tests.annotation.labeling.claiming import assignment_claim_next, assignment_prefetch
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory, api_token_key

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

CLIENTS = 16
CHAINS = 40
BARRIER_TIMEOUT = 60


@dataclass
class Outcome:
    """What the threads saw, collected under a lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    created: list[int] = field(default_factory=list)  # annotation ids of first submits
    repeats: list[tuple[int, int]] = field(default_factory=list)  # (first id, repeat id)
    skipped: list[tuple[int, int]] = field(default_factory=list)  # (chain, user)
    lost: list[int] = field(default_factory=list)  # assignment ids refused as lost
    violations: list[str] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def add(self, name: str, value: object) -> None:
        with self.lock:
            getattr(self, name).append(value)


OVER_OVERLAP_SQL = """
    SELECT c.id, c.finished_count, c.is_finished,
           (SELECT COUNT(*) FROM annotation_assignment a
             WHERE a.chain_id = c.id AND a.status = 'active' AND a.expires_at > now()) AS live,
           (SELECT COUNT(*) FROM annotation_annotation n
             WHERE n.chain_id = c.id AND n.source = 'human') AS humans
    FROM annotation_chain c
    WHERE c.project_id = %s
"""


def chain_states(project: Project) -> list[tuple[int, int, bool, int, int]]:
    """One consistent snapshot of every chain: (id, finished_count, is_finished, live
    leases, human annotations)."""
    with connection.cursor() as cursor:
        cursor.execute(OVER_OVERLAP_SQL, [project.pk])
        return cursor.fetchall()


def invariant_breaches(project: Project) -> list[str]:
    breaches = []
    for chain_id, finished, is_finished, live, humans in chain_states(project):
        if finished + live > project.overlap:
            breaches.append(f"chain {chain_id}: {finished} finished + {live} live leases")
        if humans != finished:
            breaches.append(f"chain {chain_id}: {humans} annotations, finished_count {finished}")
        if is_finished != (finished >= project.overlap):
            breaches.append(f"chain {chain_id}: is_finished {is_finished} at {finished}")
    return breaches


def run_threads(targets: list[Callable[[], None]], outcome: Outcome) -> None:
    """Run each target in its own thread with its own connection, closed at the end."""

    def wrapped(target: Callable[[], None]) -> None:
        try:
            target()
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            outcome.add("errors", exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=wrapped, args=(t,)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=240)
    assert not any(t.is_alive() for t in threads), "a client thread hung"


class Monitor:
    """Checks the invariant over and over while the clients run."""

    def __init__(self, project: Project, outcome: Outcome) -> None:
        self.project, self.outcome = project, outcome
        self.stop = threading.Event()
        self.checks = 0

    def __call__(self) -> None:
        while not self.stop.is_set():
            for breach in invariant_breaches(self.project):
                self.outcome.add("violations", f"monitor: {breach}")
            self.checks += 1


def rounds(
    barrier: threading.Barrier, step: Callable[[], bool], results: dict[int, list[bool]], me: int
) -> None:
    """Run ``step`` in lockstep rounds with the other clients until a round in which no
    client got anything."""
    round_no = 0
    while True:
        barrier.wait()
        got = step()
        results.setdefault(round_no, [False] * CLIENTS)[me] = got
        barrier.wait()
        if not any(results[round_no]):
            return
        round_no += 1


def run_in_lockstep(project: Project, outcome: Outcome, steps: list[Callable[[], bool]]) -> Monitor:
    """Run each client's ``step`` in its own thread, in lockstep rounds (``rounds``) until
    a round in which no client got anything, while a ``Monitor`` checks the invariant
    over and over. Returns the monitor, stopped."""
    barrier = threading.Barrier(len(steps), timeout=BARRIER_TIMEOUT)
    results: dict[int, list[bool]] = {}
    monitor = Monitor(project, outcome)

    def lockstep(me: int, step: Callable[[], bool]) -> Callable[[], None]:
        def run() -> None:
            try:
                rounds(barrier, step, results, me)
            except BaseException:
                barrier.abort()
                raise

        return run

    monitor_thread = threading.Thread(target=lambda: (monitor(), connections.close_all()))
    monitor_thread.start()
    try:
        run_threads([lockstep(me, step) for me, step in enumerate(steps)], outcome)
    finally:
        monitor.stop.set()
        monitor_thread.join()
    return monitor


def setup_project(overlap: int) -> tuple[Project, list]:
    project = ProjectFactory(overlap=overlap)
    for i in range(CHAINS):
        # Few distinct priorities: ties between many open chains make the scans overlap.
        ChainFactory(project=project, priority=float(i % 3), step_count=3)
    users = [MembershipFactory(project=project).user for _ in range(CLIENTS)]
    return project, users


def assert_final_state(project: Project, users: list, outcome: Outcome) -> None:
    assert not outcome.errors, outcome.errors
    assert not outcome.violations, outcome.violations[:10]
    assert not invariant_breaches(project)

    humans = Annotation.objects.filter(chain__project=project, source=AnnotationSource.HUMAN)
    # No lost submit: every annotation a client was told about is stored, and no more.
    assert sorted(humans.values_list("pk", flat=True)) == sorted(outcome.created)
    for first, repeat in outcome.repeats:
        assert first == repeat
    # Never twice to one annotator: one annotation and at most one live lease per pair.
    per_pair = Counter(humans.values_list("chain_id", "annotator_id"))
    assert max(per_pair.values(), default=0) <= 1
    leases = Counter(
        Assignment.objects.filter(project=project, status=AssignmentStatus.ACTIVE).values_list(
            "chain_id", "annotator_id"
        )
    )
    assert max(leases.values(), default=0) <= 1
    per_chain = Counter(humans.values_list("chain_id", flat=True))
    assert max(per_chain.values(), default=0) <= project.overlap
    # And nothing was answered "empty" too early: every chain is full, or every annotator
    # has annotated or skipped it.
    skipped = Counter(chain_id for chain_id, _user in outcome.skipped)
    for chain in Chain.objects.filter(project=project):
        assert chain.is_finished or per_chain[chain.pk] + skipped[chain.pk] == len(users), chain


def ratings_for(chain_id: int, rng: random.Random) -> list[RatingInput]:
    steps = Chain.objects.get(pk=chain_id).steps.order_by("index").values_list("pk", flat=True)
    return [RatingInput(step_id=s, rating=rng.choice((-1, 0, 1))) for s in steps]


@pytest.mark.parametrize("overlap", [1, 2])
def test_many_annotators_claim_and_submit_at_once(overlap: int) -> None:
    # Given 40 chains and 16 annotators
    project, users = setup_project(overlap)
    outcome = Outcome()

    def client(me: int) -> Callable[[], bool]:
        user, rng = users[me], random.Random(me)

        def step() -> bool:
            lease = assignment_claim_next(project=project, user=user)
            if lease is None:
                return False
            # Right after the claim, from this connection's fresh view.
            for breach in invariant_breaches(project):
                outcome.add("violations", f"after claim by {me}: {breach}")
            if rng.random() < 0.1:
                assignment_skip(assignment_id=lease.pk, user=user, reason="not for me")
                outcome.add("skipped", (lease.chain_id, user.pk))
                return True
            request_id = f"{me}-{lease.pk}"
            ratings = ratings_for(lease.chain_id, rng)
            annotation = assignment_submit(
                assignment_id=lease.pk, user=user, ratings=ratings, request_id=request_id
            )
            assert annotation.created
            outcome.add("created", annotation.annotation.pk)
            if rng.random() < 0.3:
                again = assignment_submit(
                    assignment_id=lease.pk, user=user, ratings=ratings, request_id=request_id
                )
                assert not again.created
                outcome.add("repeats", (annotation.annotation.pk, again.annotation.pk))
            return True

        return step

    # When they all claim, submit and sometimes skip, in lockstep, until nothing is left
    monitor = run_in_lockstep(project, outcome, [client(i) for i in range(CLIENTS)])

    # Then no chain went over its overlap, nobody got a chain twice, no submit was lost
    assert monitor.checks > 0
    assert_final_state(project, users, outcome)
    assert len(outcome.created) + len(outcome.skipped) >= CHAINS * overlap


@pytest.mark.parametrize("overlap", [1, 2])
def test_many_annotators_prefetching_claim_and_submit_at_once(overlap: int) -> None:
    # Given 40 chains and 16 annotators whose workspaces prefetch the chain after the
    # current one (two live leases each)
    project, users = setup_project(overlap)
    outcome = Outcome()

    def client(me: int) -> Callable[[], bool]:
        user, rng = users[me], random.Random(100 + me)

        def step() -> bool:
            lease = assignment_claim_next(project=project, user=user)
            if lease is None:
                return False
            ahead = assignment_prefetch(project=project, user=user)
            # A prefetch is never the current chain, and never a third lease.
            if ahead is not None and ahead.chain_id == lease.chain_id:
                outcome.add("violations", f"prefetch by {me} returned the current chain")
            live = Assignment.objects.filter(
                project=project, annotator=user, status=AssignmentStatus.ACTIVE
            ).count()
            if live > 2:
                outcome.add("violations", f"{me} holds {live} live leases")
            for breach in invariant_breaches(project):
                outcome.add("violations", f"after prefetch by {me}: {breach}")
            if rng.random() < 0.1:
                assignment_skip(assignment_id=lease.pk, user=user, reason="not for me")
                outcome.add("skipped", (lease.chain_id, user.pk))
                return True
            annotation = assignment_submit(
                assignment_id=lease.pk,
                user=user,
                ratings=ratings_for(lease.chain_id, rng),
                request_id=f"{me}-{lease.pk}",
            )
            assert annotation.created
            outcome.add("created", annotation.annotation.pk)
            return True

        return step

    # When they all claim, prefetch, submit and sometimes skip, in lockstep, until
    # nothing is left
    monitor = run_in_lockstep(project, outcome, [client(i) for i in range(CLIENTS)])

    # Then the prefetched leases counted against the overlap all along, nobody got a chain
    # twice, no submit was lost, and every prefetched chain was labeled in the end
    assert monitor.checks > 0
    assert_final_state(project, users, outcome)
    assert not Assignment.objects.filter(project=project, status=AssignmentStatus.ACTIVE).exists()


def test_the_same_annotator_prefetching_many_times_at_once_gets_two_leases() -> None:
    # Given one annotator with a current lease and several tabs prefetching together
    project, users = setup_project(overlap=1)
    user = users[0]
    current = assignment_claim_next(project=project, user=user)
    assert current is not None
    outcome = Outcome()
    barrier = threading.Barrier(CLIENTS, timeout=BARRIER_TIMEOUT)
    got: list[int] = []

    def ask() -> None:
        barrier.wait()
        lease = assignment_prefetch(project=project, user=user)
        assert lease is not None
        got.append(lease.pk)

    # When 16 prefetches arrive at once
    run_threads([ask] * CLIENTS, outcome)

    # Then they all get the same second lease: never a third
    assert not outcome.errors, outcome.errors
    assert len(set(got)) == 1 and current.pk not in got
    assert Assignment.objects.filter(annotator=user).count() == 2


def test_the_same_annotator_asking_many_times_at_once_gets_one_lease() -> None:
    # Given one annotator (a double-clicking browser, several tabs)
    project, users = setup_project(overlap=1)
    user = users[0]
    outcome = Outcome()
    barrier = threading.Barrier(CLIENTS, timeout=BARRIER_TIMEOUT)
    got: list[int] = []

    def ask() -> None:
        barrier.wait()
        lease = assignment_claim_next(project=project, user=user)
        assert lease is not None
        outcome.add("created", lease.pk)
        got.append(lease.pk)

    # When 16 requests for "next" arrive together
    run_threads([ask] * CLIENTS, outcome)

    # Then all of them get the same single lease
    assert not outcome.errors, outcome.errors
    assert len(set(got)) == 1
    assert Assignment.objects.filter(annotator=user).count() == 1


@pytest.mark.parametrize("overlap", [1, 2])
def test_late_submits_race_new_claims_for_expired_places(overlap: int) -> None:
    # Given 8 annotators whose leases on the top chains have all expired
    project, users = setup_project(overlap)
    late_users, new_users = users[:8], users[8:]
    past = timezone.now() - timedelta(seconds=1)
    late_leases = []
    for user in late_users:
        lease = assignment_claim_next(project=project, user=user)
        assert lease is not None
        late_leases.append(lease)
    Assignment.objects.filter(pk__in=[a.pk for a in late_leases]).update(expires_at=past)
    outcome = Outcome()
    barrier = threading.Barrier(CLIENTS, timeout=BARRIER_TIMEOUT)
    claimed: list[int] = []

    def late(me: int) -> Callable[[], None]:
        lease, user = late_leases[me], late_users[me]

        def run() -> None:
            ratings = ratings_for(lease.chain_id, random.Random(me))
            barrier.wait()
            try:
                annotation = assignment_submit(
                    assignment_id=lease.pk, user=user, ratings=ratings, request_id=f"late-{me}"
                )
            except LeaseLost:
                outcome.add("lost", lease.pk)
            else:
                outcome.add("created", annotation.annotation.pk)

        return run

    def new(me: int) -> Callable[[], None]:
        user = new_users[me]

        def run() -> None:
            barrier.wait()
            # Claim twice: the second "next" returns the same live lease.
            for _ in range(2):
                lease = assignment_claim_next(project=project, user=user)
                if lease is not None:
                    claimed.append(lease.pk)
            for breach in invariant_breaches(project):
                outcome.add("violations", f"after claim by new {me}: {breach}")

        return run

    # When the late annotators submit while new ones claim, all at the same instant
    run_threads([late(i) for i in range(8)] + [new(i) for i in range(8)], outcome)

    # Then every late submit was either accepted or refused as lost, never both a late
    # label and a new lease beyond the overlap
    assert not outcome.errors, outcome.errors
    assert not outcome.violations, outcome.violations
    assert len(outcome.created) + len(outcome.lost) == len(late_leases)
    assert not invariant_breaches(project)
    assert sorted(
        Annotation.objects.filter(chain__project=project).values_list("pk", flat=True)
    ) == sorted(outcome.created)
    for lease_id in outcome.lost:
        lease = Assignment.objects.get(pk=lease_id)
        assert lease.status == AssignmentStatus.EXPIRED
        assert not Annotation.objects.filter(assignment=lease).exists()


def test_many_annotators_over_http() -> None:
    # Given 40 chains with overlap 2 and 16 annotators, each with their own API client
    project, users = setup_project(overlap=2)
    outcome = Outcome()
    statuses: Counter[int] = Counter()

    def client(me: int) -> Callable[[], bool]:
        user, rng = users[me], random.Random(1000 + me)
        api = APIClient()
        api.force_authenticate(user=user)
        next_url = f"/api/v1/projects/{project.pk}/assignments/next/"

        def step() -> bool:
            response = api.post(next_url)
            with outcome.lock:
                statuses[response.status_code] += 1
            if response.status_code == 204:
                return False
            assert response.status_code == 200, response.content
            body = response.json()
            lease_id = body["assignment"]["id"]
            if rng.random() < 0.1:
                skip = api.post(
                    f"/api/v1/assignments/{lease_id}/skip/", {"reason": "no"}, format="json"
                )
                assert skip.status_code == 200, skip.content
                outcome.add("skipped", (body["chain"]["id"], user.pk))
                return True
            payload = {
                "ratings": [
                    {"step": s["id"], "rating": rng.choice((-1, 0, 1))}
                    for s in body["chain"]["steps"]
                ],
                "request_id": f"http-{me}-{lease_id}",
            }
            url = f"/api/v1/assignments/{lease_id}/submit/"
            submitted = api.post(url, payload, format="json")
            assert submitted.status_code == 201, submitted.content
            annotation_id = submitted.json()["annotation"]["id"]
            outcome.add("created", annotation_id)
            if rng.random() < 0.3:
                again = api.post(url, payload, format="json")
                assert again.status_code == 201, again.content
                assert again.json() == submitted.json()
                outcome.add("repeats", (annotation_id, again.json()["annotation"]["id"]))
            return True

        return step

    # When they all label over HTTP in lockstep until the queue is empty for everyone
    run_in_lockstep(project, outcome, [client(i) for i in range(CLIENTS)])

    # Then the invariants hold and only 200/204 came back from next
    assert set(statuses) <= {200, 204}
    assert_final_state(project, users, outcome)


def test_a_chain_locked_by_a_submit_in_flight_is_waited_for_not_reported_empty() -> None:
    # Given the only open chain, locked for a moment by another transaction (as a submit
    # or a claim on it would)
    project, users = setup_project(overlap=2)
    Chain.objects.filter(project=project).exclude(
        pk=Chain.objects.filter(project=project).order_by("id").values("pk")[:1]
    ).update(is_flagged=True)
    chain = Chain.objects.get(project=project, is_flagged=False)
    outcome = Outcome()
    locked, release = threading.Event(), threading.Event()

    def hold_lock() -> None:
        from django.db import transaction

        with transaction.atomic():
            Chain.objects.select_for_update(no_key=True).get(pk=chain.pk)
            locked.set()
            release.wait(timeout=30)

    def ask() -> None:
        assert locked.wait(timeout=30)
        # Let the holder go only once this claim has had time to reach the lock.
        threading.Timer(0.3, release.set).start()
        lease = assignment_claim_next(project=project, user=users[0])
        outcome.add("created", lease.chain_id if lease else None)

    # When an annotator asks for the next chain meanwhile
    run_threads([hold_lock, ask], outcome)

    # Then the claim waits for the lock and gets the chain instead of "nothing left"
    assert not outcome.errors, outcome.errors
    assert outcome.created == [chain.pk]


SKIP_SUBMIT_TRIALS = 25


@pytest.mark.parametrize("action", ["skip", "flag"])
@pytest.mark.parametrize("way", ["drf", "token"])
def test_a_skip_racing_a_submit_of_the_same_lease_has_exactly_one_winner(
    way: str, action: str
) -> None:
    # Given an annotator with many chains, reaching the API through DRF's full cycle
    # (forced authentication) or through an API token (submit then takes the token door);
    # a flag closes the lease as a skip does
    project = ProjectFactory(overlap=1)
    for _ in range(SKIP_SUBMIT_TRIALS):
        ChainFactory(project=project, step_count=3)
    user = MembershipFactory(project=project).user
    key = api_token_key(user) if way == "token" else None

    def api() -> APIClient:
        client = APIClient()
        if key is None:
            client.force_authenticate(user=user)
        else:
            client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        return client

    def post(
        start: threading.Barrier, answers: dict, name: str, url: str, payload: dict
    ) -> Callable[[], None]:
        def run() -> None:
            client = api()
            start.wait()
            response = client.post(url, payload, format="json")
            answers[name] = (response.status_code, response.json())

        return run

    failures: list[str] = []
    for trial in range(SKIP_SUBMIT_TRIALS):
        lease = assignment_claim_next(project=project, user=user)
        assert lease is not None
        steps = Chain.objects.get(pk=lease.chain_id).steps.order_by("index")
        ratings = [{"step": STEP_IDS.of(s, viewer=user.pk), "rating": 1} for s in steps]
        body = {"ratings": ratings, "request_id": f"r{trial}"}
        answers: dict[str, tuple[int, dict]] = {}
        start = threading.Barrier(2, timeout=BARRIER_TIMEOUT)
        outcome = Outcome()

        # When the skip (or flag) and the submit of that lease are sent at the same instant
        lease_id = ASSIGNMENT_IDS.show(lease.pk, viewer=None)
        skip_url = f"/api/v1/assignments/{lease_id}/{action}/"
        submit_url = f"/api/v1/assignments/{lease_id}/submit/"
        run_threads(
            [
                post(start, answers, "skip", skip_url, {"reason": "unsure"}),
                post(start, answers, "submit", submit_url, body),
            ],
            outcome,
        )

        # Then exactly one wins, the other gets 409 with a reason, and the lease agrees
        assert not outcome.errors, outcome.errors
        codes = {name: status for name, (status, _) in answers.items()}
        winners = [name for name, status in codes.items() if 200 <= status < 300]
        losers = [name for name, status in codes.items() if status == 409]
        if len(winners) != 1 or len(losers) != 1:
            failures.append(f"trial {trial}: {codes}")
            continue
        loser_body = answers[losers[0]][1]
        assert loser_body["code"] == "lease_closed" and loser_body["detail"], loser_body
        stored = Assignment.objects.get(pk=lease.pk)
        annotations = Annotation.objects.filter(assignment=lease.pk)
        chain = Chain.objects.get(pk=lease.chain_id)
        if winners == ["submit"]:
            assert (stored.status, stored.skip_reason) == (AssignmentStatus.SUBMITTED, "")
            assert annotations.count() == 1 and chain.finished_count == 1
            assert not chain.is_flagged and chain.flagged_by is None
        else:
            reason = "unsure" if action == "skip" else f"{FLAG_REASON_PREFIX}unsure"
            assert (stored.status, stored.skip_reason) == (AssignmentStatus.SKIPPED, reason)
            assert not annotations.exists() and chain.finished_count == 0
            assert chain.is_flagged == (action == "flag")
    assert not failures, failures
