"""The labeling queue over HTTP: next, submit, renew, skip."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.models import (
    Annotation,
    AnnotationSource,
    Assignment,
    AssignmentStatus,
    Chain,
    ImportBatch,
    LabelingMode,
    Project,
    Role,
    StepRating,
)
from annotation.public_ids import ASSIGNMENT_IDS, CHAIN_IDS, PUBLIC_ID_MAX, STEP_IDS
from prm_training.services import autostart
from tests.factories import ChainFactory, ProblemFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db


def next_url(project: Project | int) -> str:
    return f"/api/v1/projects/{getattr(project, 'pk', project)}/assignments/next/"


def lease_url(assignment_id: int, action: str) -> str:
    return f"/api/v1/assignments/{assignment_id}/{action}/"


def ratings_body(chain_id: int, value: int = 1, *, viewer: int, **extra: object) -> dict:
    """A submit body rating every step of the chain whose public id is ``chain_id``, as
    the annotator ``viewer`` (their user id, whose client was given it) read it."""
    steps = Chain.objects.get(pk=CHAIN_IDS.read(chain_id, viewer=viewer)).steps.order_by("index")
    return {
        "ratings": [{"step": STEP_IDS.of(s, viewer=viewer), "rating": value} for s in steps],
        **extra,
    }


@pytest.fixture
def annotator(project, make_member):
    return make_member(project)


@pytest.fixture
def client(annotator, client_for) -> APIClient:
    return client_for(annotator)


# --- next --------------------------------------------------------------------------------


def test_next_returns_the_lease_and_the_chain_to_label(project, client, annotator) -> None:
    # Given a chain whose import carried labels and metadata
    problem = ProblemFactory(project=project, text="What is 6 * 7?", reference_answer="42")
    chain = ChainFactory(
        project=project, problem=problem, step_count=2, generator="gpt-x", meta={"labels": [1, -1]}
    )
    batch = ImportBatch.objects.create(
        project=project, filename="f.jsonl", format="prm800k", content_hash="1" * 64
    )
    imported = Annotation.objects.create(
        chain=chain, source=AnnotationSource.IMPORT, import_batch=batch
    )
    StepRating.objects.create(annotation=imported, step=chain.steps.first(), rating=-1)

    # When the annotator asks for the next chain
    response = client.post(next_url(project))

    # Then it gets its lease and exactly what it needs to grade, nothing more
    assert response.status_code == 200
    body = response.json()
    lease = Assignment.objects.get()
    assert body["assignment"]["id"] == ASSIGNMENT_IDS.show(lease.pk, viewer=None)
    assert body["assignment"]["expires_at"].startswith(lease.expires_at.strftime("%Y-%m-%dT%H:%M"))
    steps = list(chain.steps.order_by("index"))
    assert body["chain"] == {
        "id": CHAIN_IDS.show(chain.pk, viewer=annotator.pk),
        "problem": {"text": "What is 6 * 7?", "reference_answer": "42"},
        "steps": [
            {
                "id": STEP_IDS.of(s, viewer=annotator.pk),
                "index": s.index,
                "text": s.text,
                "prelabel": None,
            }
            for s in steps
        ],
        "final_answer": "42",
        "labeling_mode": "all_steps",
        "prelabel_source": None,
    }


def test_next_hides_the_reference_answer_when_the_project_says_so(make_member, client_for):
    project = ProjectFactory(show_reference_answer=False, labeling_mode=LabelingMode.FIRST_ERROR)
    ChainFactory(project=project)

    body = client_for(make_member(project)).post(next_url(project)).json()

    assert "reference_answer" not in body["chain"]["problem"]
    assert body["chain"]["labeling_mode"] == "first_error"


def test_next_twice_returns_the_same_lease(project, client) -> None:
    ChainFactory.create_batch(2, project=project)

    first = client.post(next_url(project)).json()
    second = client.post(next_url(project)).json()

    assert second == first
    assert Assignment.objects.count() == 1


def test_next_answers_204_when_nothing_is_left(project, client) -> None:
    response = client.post(next_url(project))

    assert response.status_code == 204
    assert response.content == b""


@pytest.mark.parametrize("role", [Role.ANNOTATOR, Role.LEAD, Role.ML])
def test_every_member_may_label(project, make_member, client_for, role) -> None:
    ChainFactory(project=project)

    response = client_for(make_member(project, role=role)).post(next_url(project))

    assert response.status_code == 200


def test_next_in_a_foreign_or_missing_project_is_404(project, client_for) -> None:
    ChainFactory(project=project)
    outsider = client_for(UserFactory())

    assert outsider.post(next_url(project)).status_code == 404
    assert outsider.post(next_url(10**9)).status_code == 404
    assert not Assignment.objects.exists()


def test_the_queue_needs_authentication(project, api_client, annotator) -> None:
    chain = ChainFactory(project=project)
    lease = Assignment.objects.create(
        project=project, chain=chain, annotator=annotator, expires_at=timezone.now() + timedelta(1)
    )

    assert api_client.post(next_url(project)).status_code in (401, 403)
    for action in ("submit", "renew", "skip"):
        url = lease_url(ASSIGNMENT_IDS.show(lease.pk, viewer=None), action)
        assert api_client.post(url, {}).status_code in (401, 403)
    assert not Assignment.objects.exclude(pk=lease.pk).exists()


# --- submit ------------------------------------------------------------------------------


def test_submit_answers_201_with_the_annotation(project, client, annotator) -> None:
    ChainFactory(project=project)
    leased = client.post(next_url(project)).json()
    chain_id = leased["chain"]["id"]
    body = ratings_body(chain_id, viewer=annotator.pk, duration_ms=1500, request_id="r-1")
    body["ratings"][0]["comment"] = "clear"

    response = client.post(lease_url(leased["assignment"]["id"], "submit"), body, format="json")

    assert response.status_code == 201
    annotation = Annotation.objects.get()
    data = response.json()["annotation"]
    assert data["id"] == annotation.pk
    assert data["chain"] == chain_id
    assert data["request_id"] == "r-1"
    assert data["duration_ms"] == 1500
    assert data["ratings"] == [
        {"step": r["step"], "rating": 1, "comment": "clear" if i == 0 else ""}
        for i, r in enumerate(body["ratings"])
    ]


@pytest.mark.parametrize("extras", [{}, {"comment": " a note ", "rewrite": " fixed "}])
def test_a_repeated_submit_answers_as_the_first_did(project, client, annotator, extras) -> None:
    # Given a leased chain and a submit body with a request_id (plain ints, which take the
    # hand-written answer, or with a comment and a rewrite, which take the serializer)
    ChainFactory(project=project)
    leased = client.post(next_url(project)).json()
    url = lease_url(leased["assignment"]["id"], "submit")
    body = ratings_body(leased["chain"]["id"], viewer=annotator.pk, request_id="same")
    if extras:
        body["ratings"][0] = {**body["ratings"][0], "rating": -1, "comment": extras["comment"]}
        body["rewrite"] = extras["rewrite"]

    # When it is sent twice (the first answer was lost on the way)
    first = client.post(url, body, format="json")
    again = client.post(url, body, format="json")

    # Then the repeat gets the first answer again, status and body, and writes nothing
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json() == first.json()
    assert Annotation.objects.count() == 1
    assert StepRating.objects.count() == 3


@pytest.mark.parametrize(
    ("mutate", "field", "expected"),
    [
        (lambda b: b["ratings"][1].update(rating=5), "ratings", "Step 2: a rating is"),
        (lambda b: b["ratings"].pop(), "ratings", "missing: step 3"),
        (lambda b: b["ratings"].append(dict(b["ratings"][0])), "ratings", "more than once"),
        (lambda b: b["ratings"][0].update(step=10**9), "ratings", "not a step of this chain"),
        (lambda b: b.update(ratings=[]), "ratings", ""),
        (lambda b: b["ratings"][0].update(rating="good"), "ratings", ""),
        (lambda b: b.update(rewrite="but why"), "rewrite", "first incorrect step"),
        (lambda b: b.update(duration_ms=-1), "duration_ms", ""),
    ],
)
def test_invalid_submits_are_400_with_a_clear_message(
    project, client, annotator, mutate, field, expected
):
    ChainFactory(project=project)
    leased = client.post(next_url(project)).json()
    body = ratings_body(leased["chain"]["id"], viewer=annotator.pk)
    mutate(body)

    response = client.post(lease_url(leased["assignment"]["id"], "submit"), body, format="json")

    assert response.status_code == 400
    assert field in response.json()
    assert expected in str(response.json()[field])
    assert not Annotation.objects.exists()


def test_first_error_submit_over_http(make_member, client_for) -> None:
    project = ProjectFactory(labeling_mode=LabelingMode.FIRST_ERROR)
    ChainFactory(project=project, step_count=4)
    client = client_for(make_member(project))
    leased = client.post(next_url(project)).json()
    url = lease_url(leased["assignment"]["id"], "submit")
    steps = leased["chain"]["steps"]

    too_many = {
        "ratings": [
            {"step": s["id"], "rating": r} for s, r in zip(steps, [1, -1, 1, 1], strict=True)
        ]
    }
    refused = client.post(url, too_many, format="json")
    stopped = {
        "ratings": [
            {"step": s["id"], "rating": r} for s, r in zip(steps[:2], [1, -1], strict=True)
        ],
        "rewrite": "7 * 6 = 42",
    }
    accepted = client.post(url, stopped, format="json")

    assert refused.status_code == 400
    assert "grading stops at the first incorrect step" in str(refused.json()["ratings"])
    assert accepted.status_code == 201
    assert len(accepted.json()["annotation"]["ratings"]) == 2


def test_leases_and_steps_are_named_by_their_public_ids_only(project, client, annotator) -> None:
    # Given a lease on a chain
    ChainFactory(project=project)
    leased = client.post(next_url(project)).json()
    lease = Assignment.objects.get()
    assert leased["assignment"]["id"] != lease.pk

    # Then the lease's row id names no lease of the caller, nor does a number past the
    # public ids' range
    body = ratings_body(leased["chain"]["id"], viewer=annotator.pk)
    for wrong in (lease.pk, PUBLIC_ID_MAX + 1):
        assert client.post(lease_url(wrong, "renew")).status_code == 404
        assert client.post(lease_url(wrong, "submit"), body, format="json").status_code == 404
    # And a step named by its row id is no step of the chain, and the message names the
    # rating, not a row id
    step_row_id = lease.chain.steps.order_by("index")[0].pk
    body["ratings"][0]["step"] = step_row_id
    response = client.post(lease_url(leased["assignment"]["id"], "submit"), body, format="json")
    assert response.status_code == 400
    assert response.json() == {"ratings": ["The step of rating 1 is not a step of this chain."]}
    assert not Annotation.objects.exists()


def test_submit_for_someone_elses_lease_is_404(project, client, make_member, client_for, annotator):
    ChainFactory(project=project)
    leased = client.post(next_url(project)).json()
    intruder = client_for(make_member(project))

    response = intruder.post(
        lease_url(leased["assignment"]["id"], "submit"),
        ratings_body(leased["chain"]["id"], viewer=annotator.pk),
        format="json",
    )

    assert response.status_code == 404
    assert not Annotation.objects.exists()


def test_submit_of_an_expired_lease_taken_by_someone_else_is_409(
    project, client, make_member, client_for, annotator
):
    # Given a lease that ran out, and whose place another annotator then took
    ChainFactory(project=project)
    leased = client.post(next_url(project)).json()
    Assignment.objects.filter(
        pk=ASSIGNMENT_IDS.read(leased["assignment"]["id"], viewer=None)
    ).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert client_for(make_member(project)).post(next_url(project)).status_code == 200

    # When the first annotator submits
    response = client.post(
        lease_url(leased["assignment"]["id"], "submit"),
        ratings_body(leased["chain"]["id"], viewer=annotator.pk),
        format="json",
    )

    # Then it is refused with a clear conflict, and nothing is recorded
    assert response.status_code == 409
    assert response.json()["code"] == "lease_lost"
    assert "expired" in response.json()["detail"]
    assert not Annotation.objects.exists()


def test_submit_of_an_expired_lease_whose_place_is_free_is_201(project, client, annotator) -> None:
    ChainFactory(project=project)
    leased = client.post(next_url(project)).json()
    Assignment.objects.filter(
        pk=ASSIGNMENT_IDS.read(leased["assignment"]["id"], viewer=None)
    ).update(expires_at=timezone.now() - timedelta(hours=1))

    response = client.post(
        lease_url(leased["assignment"]["id"], "submit"),
        ratings_body(leased["chain"]["id"], viewer=annotator.pk),
        format="json",
    )

    assert response.status_code == 201


def test_a_second_submit_without_request_id_is_409(project, client, annotator) -> None:
    ChainFactory(project=project)
    leased = client.post(next_url(project)).json()
    url = lease_url(leased["assignment"]["id"], "submit")

    assert (
        client.post(
            url, ratings_body(leased["chain"]["id"], viewer=annotator.pk), format="json"
        ).status_code
        == 201
    )
    again = client.post(
        url, ratings_body(leased["chain"]["id"], -1, viewer=annotator.pk), format="json"
    )

    assert again.status_code == 409
    assert again.json()["code"] == "lease_closed"
    assert set(StepRating.objects.values_list("rating", flat=True)) == {1}


# --- renew and skip ------------------------------------------------------------------------


def test_renew_extends_the_lease(project, client) -> None:
    ChainFactory(project=project)
    leased = client.post(next_url(project)).json()
    lease_id = leased["assignment"]["id"]
    soon = timezone.now() + timedelta(minutes=1)
    Assignment.objects.filter(pk=ASSIGNMENT_IDS.read(lease_id, viewer=None)).update(expires_at=soon)

    response = client.post(lease_url(lease_id, "renew"))

    assert response.status_code == 200
    assert response.json()["id"] == lease_id
    lease = Assignment.objects.get(pk=ASSIGNMENT_IDS.read(lease_id, viewer=None))
    assert lease.expires_at > soon + timedelta(minutes=25)


def test_renew_and_skip_of_someone_elses_lease_are_404(project, client, make_member, client_for):
    ChainFactory(project=project)
    lease_id = client.post(next_url(project)).json()["assignment"]["id"]
    intruder = client_for(make_member(project))

    assert intruder.post(lease_url(lease_id, "renew")).status_code == 404
    assert intruder.post(lease_url(lease_id, "skip"), {"reason": "x"}).status_code == 404
    lease = Assignment.objects.get(pk=ASSIGNMENT_IDS.read(lease_id, viewer=None))
    assert lease.status == AssignmentStatus.ACTIVE


def test_skip_needs_a_reason_and_then_the_chain_is_gone(project, client) -> None:
    ChainFactory(project=project)
    lease_id = client.post(next_url(project)).json()["assignment"]["id"]

    no_reason = client.post(lease_url(lease_id, "skip"), {"reason": " "}, format="json")
    skipped = client.post(lease_url(lease_id, "skip"), {"reason": "not math"}, format="json")

    assert no_reason.status_code == 400
    assert "reason" in no_reason.json()
    assert skipped.status_code == 200
    assert skipped.json() == {"id": lease_id, "status": "skipped", "skip_reason": "not math"}
    assert client.post(next_url(project)).status_code == 204


def test_skip_of_a_submitted_lease_is_409(project, client, annotator) -> None:
    ChainFactory(project=project)
    leased = client.post(next_url(project)).json()
    lease_id = leased["assignment"]["id"]
    client.post(
        lease_url(lease_id, "submit"),
        ratings_body(leased["chain"]["id"], viewer=annotator.pk),
        format="json",
    )

    response = client.post(lease_url(lease_id, "skip"), {"reason": "late"}, format="json")

    assert response.status_code == 409


def test_the_schema_documents_the_queue(client) -> None:
    response = client.get("/api/schema/", {"format": "json"})

    assert response.status_code == 200
    paths = response.json()["paths"]
    next_op = paths["/api/v1/projects/{project_id}/assignments/next/"]["post"]
    assert set(next_op["responses"]) >= {"200", "204", "404"}
    submit_op = paths["/api/v1/assignments/{assignment_id}/submit/"]["post"]
    assert set(submit_op["responses"]) >= {"201", "400", "404", "409"}
    assert "requestBody" in submit_op
    assert "/api/v1/assignments/{assignment_id}/renew/" in paths
    assert "/api/v1/assignments/{assignment_id}/skip/" in paths


# --- query counts --------------------------------------------------------------------------
#
# Over HTTP with a forced login (no auth query). Inside the test transaction each atomic()
# is a SAVEPOINT/RELEASE pair; in production those are BEGIN/COMMIT, not logged.


def test_next_query_count_with_a_new_lease(project, client, django_assert_num_queries):
    ChainFactory.create_batch(5, project=project)

    # project with the membership check; claim (6, see the service test), whose lease
    # insert also reads the steps with their chain and problem for the answer
    with django_assert_num_queries(7):
        response = client.post(next_url(project))
    assert response.status_code == 200


def test_next_query_count_with_an_existing_lease(project, client, django_assert_num_queries):
    ChainFactory.create_batch(5, project=project)
    client.post(next_url(project))

    # project with the membership check; savepoint, lock user, own leases, release; steps
    # with their chain and problem
    with django_assert_num_queries(6):
        response = client.post(next_url(project))
    assert response.status_code == 200


def test_submit_query_count(project, client, django_assert_num_queries, annotator) -> None:
    ChainFactory(project=project, step_count=12)
    leased = client.post(next_url(project)).json()
    body = ratings_body(leased["chain"]["id"], viewer=annotator.pk, request_id="q")

    # the service's 5 (see the service test), and whether the project retrains
    # automatically, read once every few seconds per project (the chain just finished); the
    # answer is built from the stored ratings
    autostart._autostart_seen.clear()
    with django_assert_num_queries(6):
        response = client.post(lease_url(leased["assignment"]["id"], "submit"), body, format="json")
    assert response.status_code == 201
