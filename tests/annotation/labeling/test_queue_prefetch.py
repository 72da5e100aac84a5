"""Prefetch: a second live lease per annotator, so the workspace can show the next chain
the moment the current one is submitted. Plus the submit answer built by hand."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.labeling.api.assignments import AnnotationOutputSerializer, annotation_payload
from annotation.labeling.queue.claim import MAX_LIVE_LEASES
from annotation.labeling.queue.leases import assignment_renew
from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.models import Annotation, Assignment, AssignmentStatus, Chain, Project, Role
from annotation.public_ids import CHAIN_IDS, STEP_IDS
from tests.annotation.labeling.claiming import assignment_claim_next, assignment_prefetch
from tests.factories import ChainFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db


def next_url(project: Project | int) -> str:
    return f"/api/v1/projects/{getattr(project, 'pk', project)}/assignments/next/"


def prefetch_url(project: Project | int) -> str:
    return f"/api/v1/projects/{getattr(project, 'pk', project)}/assignments/prefetch/"


def submit_url(assignment_id: int) -> str:
    return f"/api/v1/assignments/{assignment_id}/submit/"


def ratings_body(chain_id: int, *, viewer: int, **extra: object) -> dict:
    """A submit body rating every step of the chain whose public id is ``chain_id``, as
    the annotator ``viewer`` (their user id) read it."""
    steps = Chain.objects.get(pk=CHAIN_IDS.read(chain_id, viewer=viewer)).steps.order_by("index")
    return {
        "ratings": [{"step": STEP_IDS.of(s, viewer=viewer), "rating": 1} for s in steps],
        **extra,
    }


def rate_all(chain_id: int) -> list[RatingInput]:
    steps = Chain.objects.get(pk=chain_id).steps.order_by("index")
    return [RatingInput(step_id=s.pk, rating=1) for s in steps]


@pytest.fixture
def annotator(project, make_member):
    return make_member(project)


@pytest.fixture
def client(annotator, client_for) -> APIClient:
    return client_for(annotator)


def live_leases(user) -> list[Assignment]:
    return list(
        Assignment.objects.filter(
            annotator=user, status=AssignmentStatus.ACTIVE, expires_at__gt=timezone.now()
        ).order_by("id")
    )


# --- service -------------------------------------------------------------------------------


def test_prefetch_leases_a_second_chain_and_next_keeps_the_first(project, annotator) -> None:
    # Given an annotator working on the top chain
    first, second, _third = (ChainFactory(project=project, priority=p) for p in (3, 2, 1))
    current = assignment_claim_next(project=project, user=annotator)
    assert current is not None and current.chain_id == first.pk

    # When the workspace prefetches
    prefetched = assignment_prefetch(project=project, user=annotator)

    # Then the next chain in queue order is leased too, and next still answers the current
    assert prefetched is not None and prefetched.chain_id == second.pk
    assert prefetched.pk != current.pk
    again = assignment_claim_next(project=project, user=annotator)
    assert again is not None and again.pk == current.pk
    assert [lease.pk for lease in live_leases(annotator)] == [current.pk, prefetched.pk]


def test_a_third_prefetch_returns_the_second_lease(project, annotator) -> None:
    ChainFactory.create_batch(5, project=project)
    current = assignment_claim_next(project=project, user=annotator)
    prefetched = assignment_prefetch(project=project, user=annotator)
    assert current is not None and prefetched is not None

    # When prefetch is asked again (twice)
    again = assignment_prefetch(project=project, user=annotator)
    once_more = assignment_prefetch(project=project, user=annotator)

    # Then no third lease: the newer one comes back
    assert again is not None and once_more is not None
    assert again.pk == once_more.pk == prefetched.pk
    assert len(live_leases(annotator)) == MAX_LIVE_LEASES == 2


def test_prefetch_without_a_lease_takes_one_and_next_returns_it(project, annotator) -> None:
    ChainFactory.create_batch(2, project=project)

    prefetched = assignment_prefetch(project=project, user=annotator)

    assert prefetched is not None
    current = assignment_claim_next(project=project, user=annotator)
    assert current is not None and current.pk == prefetched.pk


def test_prefetch_with_nothing_else_left_is_none(project, annotator) -> None:
    # Given a single chain, leased by the caller
    ChainFactory(project=project)
    current = assignment_claim_next(project=project, user=annotator)
    assert current is not None

    # When prefetching, then nothing (never the same chain twice to one annotator)
    assert assignment_prefetch(project=project, user=annotator) is None
    assert len(live_leases(annotator)) == 1


def test_a_prefetched_lease_takes_a_place_in_the_overlap(make_member) -> None:
    # Given overlap 1, two chains, and an annotator holding both (current + prefetched)
    project = ProjectFactory(overlap=1)
    ChainFactory.create_batch(2, project=project)
    first, other = make_member(project), make_member(project)
    assert assignment_claim_next(project=project, user=first) is not None
    assert assignment_prefetch(project=project, user=first) is not None

    # Then nothing is left for anyone else
    assert assignment_claim_next(project=project, user=other) is None
    assert assignment_prefetch(project=project, user=other) is None


def test_after_submit_next_returns_the_prefetched_chain(project, annotator) -> None:
    ChainFactory.create_batch(3, project=project)
    current = assignment_claim_next(project=project, user=annotator)
    prefetched = assignment_prefetch(project=project, user=annotator)
    assert current is not None and prefetched is not None

    assignment_submit(assignment_id=current.pk, user=annotator, ratings=rate_all(current.chain_id))
    following = assignment_claim_next(project=project, user=annotator)

    assert following is not None and following.pk == prefetched.pk
    # And the workspace may prefetch the one after it
    after = assignment_prefetch(project=project, user=annotator)
    assert after is not None and after.chain_id not in (current.chain_id, prefetched.chain_id)


def test_renew_works_for_both_leases(project, annotator) -> None:
    ChainFactory.create_batch(2, project=project)
    now = timezone.now()
    current = assignment_claim_next(project=project, user=annotator, now=now)
    prefetched = assignment_prefetch(project=project, user=annotator, now=now)
    assert current is not None and prefetched is not None

    later = now + timedelta(minutes=20)
    for lease in (current, prefetched):
        renewed = assignment_renew(assignment_id=lease.pk, user=annotator, now=later)
        assert renewed.expires_at == later + project.lease_duration


def test_an_expired_prefetch_frees_its_place(make_member) -> None:
    project = ProjectFactory(overlap=1)
    ChainFactory.create_batch(2, project=project)
    first, other = make_member(project), make_member(project)
    now = timezone.now()
    assignment_claim_next(project=project, user=first, now=now)
    prefetched = assignment_prefetch(project=project, user=first, now=now)
    assert prefetched is not None

    # When the prefetched lease runs out, its chain goes to someone else
    later = now + project.lease_duration + timedelta(seconds=1)
    taken = assignment_claim_next(project=project, user=other, now=later)
    assert taken is not None


# --- API -----------------------------------------------------------------------------------


def test_prefetch_then_submit_then_next_over_http(project, client, annotator) -> None:
    ChainFactory.create_batch(3, project=project)
    current = client.post(next_url(project)).json()

    prefetched = client.post(prefetch_url(project))
    assert prefetched.status_code == 200
    body = prefetched.json()
    assert set(body) == {"assignment", "chain"}
    assert body["chain"]["id"] != current["chain"]["id"]
    assert [s["index"] for s in body["chain"]["steps"]] == sorted(
        s["index"] for s in body["chain"]["steps"]
    )

    submitted = client.post(
        submit_url(current["assignment"]["id"]),
        ratings_body(current["chain"]["id"], viewer=annotator.pk, request_id="a"),
        format="json",
    )
    assert submitted.status_code == 201
    following = client.post(next_url(project)).json()
    assert following == body


def test_prefetch_with_nothing_else_left_is_204(project, client) -> None:
    ChainFactory(project=project)
    assert client.post(next_url(project)).status_code == 200

    response = client.post(prefetch_url(project))

    assert response.status_code == 204
    assert response.content == b""


def test_a_third_prefetch_over_http_returns_the_same_lease(project, client, annotator) -> None:
    ChainFactory.create_batch(4, project=project)
    client.post(next_url(project))
    first = client.post(prefetch_url(project)).json()

    second = client.post(prefetch_url(project)).json()

    assert first == second
    assert len(live_leases(annotator)) == 2


@pytest.mark.parametrize("role", [Role.ANNOTATOR, Role.LEAD, Role.ML])
def test_every_member_may_prefetch(project, make_member, client_for, role) -> None:
    ChainFactory(project=project)

    response = client_for(make_member(project, role=role)).post(prefetch_url(project))

    assert response.status_code == 200


def test_prefetch_in_a_foreign_or_missing_project_is_404(project, client_for) -> None:
    ChainFactory(project=project)
    outsider = client_for(UserFactory())

    assert outsider.post(prefetch_url(project)).status_code == 404
    assert outsider.post(prefetch_url(10**9)).status_code == 404
    assert outsider.post(prefetch_url("x")).status_code == 404
    assert not Assignment.objects.exists()


def test_prefetch_needs_authentication(project, api_client) -> None:
    ChainFactory(project=project)

    assert api_client.post(prefetch_url(project)).status_code in (401, 403)
    assert not Assignment.objects.exists()


def test_the_schema_documents_prefetch(client) -> None:
    response = client.get("/api/schema/", {"format": "json"})

    operation = response.json()["paths"]["/api/v1/projects/{project_id}/assignments/prefetch/"]
    assert set(operation["post"]["responses"]) >= {"200", "204", "404"}
    assert operation["post"]["operationId"] == "assignments_prefetch"


def test_prefetch_query_count(project, client, django_assert_num_queries) -> None:
    ChainFactory.create_batch(5, project=project)
    client.post(next_url(project))

    # project with the membership check; savepoint, lock user, own live leases, candidate,
    # insert the lease if still free (reading the steps with their chain and problem for
    # the answer in the same statement), release
    with django_assert_num_queries(7):
        response = client.post(prefetch_url(project))
    assert response.status_code == 200


# --- the submit answer ---------------------------------------------------------------------


def test_a_submits_answer_is_what_the_schema_describes(project, annotator) -> None:
    # Given a submit with comments (stored stripped), durations and a request id
    chain = ChainFactory(project=project, step_count=3)
    lease = assignment_claim_next(project=project, user=annotator)
    assert lease is not None
    steps = list(chain.steps.order_by("index"))
    # (named by their public ids as the annotator read them, as the API's submit names them)
    viewer = annotator.pk
    ratings = [
        RatingInput(
            step_id=STEP_IDS.of(steps[2], viewer=viewer), rating=0, comment="  unsure <b>why</b> "
        ),
        RatingInput(step_id=STEP_IDS.of(steps[0], viewer=viewer), rating=1, duration_ms=1200),
        RatingInput(step_id=STEP_IDS.of(steps[1], viewer=viewer), rating=-1),
    ]
    submitted = assignment_submit(
        assignment_id=lease.pk,
        user=annotator,
        ratings=ratings,
        rewrite="fixed step",
        duration_ms=5000,
        request_id="r-1",
        public_step_ids=True,
    )
    repeat = assignment_submit(
        assignment_id=lease.pk,
        user=annotator,
        ratings=ratings,
        request_id="r-1",
        public_step_ids=True,
    )

    # When the answer is built from what the submit recorded, and from its repeat
    payload = annotation_payload(submitted)

    # Then it is what the schema's serializer gives for the stored row, ratings in step
    # order, comments stripped; the repeat answers the same
    described = AnnotationOutputSerializer(
        Annotation.objects.get(pk=submitted.annotation.pk), context={"viewer": viewer}
    )
    # (the stored rows come in step row id order)
    by_step = sorted(
        described.data["ratings"], key=lambda r: STEP_IDS.read(r["step"], viewer=viewer)[1]
    )
    assert payload == {**described.data, "ratings": by_step}
    assert [r["step"] for r in payload["ratings"]] == [STEP_IDS.of(s, viewer=viewer) for s in steps]
    assert payload["ratings"][2]["comment"] == "unsure <b>why</b>"
    assert not repeat.created and annotation_payload(repeat) == payload
