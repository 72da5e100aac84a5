"""next and submit over an API token come in by the token door (``QueueView.token_post``)
to the same answer as DRF's door; the answers must be the ones DRF's full request cycle
gives, errors included, and whatever the token door does not take must reach DRF
untouched."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from annotation.labeling.api.token_door import QueueView
from annotation.models import Annotation, Assignment, AssignmentStatus, Chain
from annotation.public_ids import ASSIGNMENT_IDS, CHAIN_IDS, STEP_IDS
from tests.factories import ChainFactory, ProjectFactory, api_token_key

pytestmark = pytest.mark.django_db


def next_url(project) -> str:
    return f"/api/v1/projects/{project.pk}/assignments/next/"


def submit_url(assignment_id: int) -> str:
    return f"/api/v1/assignments/{assignment_id}/submit/"


def ratings_body(chain_id: int, value: int = 1, *, viewer: int, **extra: object) -> dict:
    """A submit body rating every step of the chain whose public id is ``chain_id``, as
    the annotator ``viewer`` (their user id, whose client was given it) read it."""
    steps = Chain.objects.get(pk=CHAIN_IDS.read(chain_id, viewer=viewer)).steps.order_by("index")
    return {
        "ratings": [{"step": STEP_IDS.of(s, viewer=viewer), "rating": value} for s in steps],
        **extra,
    }


@pytest.fixture
def door_calls(monkeypatch) -> list[str]:
    """The names of the views whose token door answered (did not hand over to DRF)."""
    answered: list[str] = []
    for view in QueueView.__subclasses__():
        original = view.token_post

        def spy(self, request, key, _original=original, **kwargs):
            response = _original(self, request, key, **kwargs)
            if response is not None:
                answered.append(type(self).__name__)
            return response

        monkeypatch.setattr(view, "token_post", spy)
    return answered


def clients(user) -> tuple[APIClient, APIClient]:
    """(over a token: the token door, forced authentication: DRF's door)."""
    token = APIClient()
    token.credentials(HTTP_AUTHORIZATION=f"Token {api_token_key(user)}")
    drf = APIClient()
    drf.force_authenticate(user=user)
    return token, drf


def answer(response) -> tuple[int, Any]:
    return response.status_code, (response.json() if response.content else None)


def without_ids(payload: dict) -> dict:
    """A next answer with what differs between two leases (ids, times) blanked."""
    chain = payload["chain"]
    return {
        "assignment": sorted(payload["assignment"]),
        "chain": {
            **chain,
            "id": None,
            "steps": [{**s, "id": None} for s in chain["steps"]],
            "problem": chain["problem"],
        },
    }


def test_next_and_submit_answer_as_drf_does(project, make_member, door_calls) -> None:
    # Given two annotators and two identical chains, one leased over each way
    project.overlap = 1
    project.save()
    chains = [ChainFactory(project=project, step_count=3) for _ in range(2)]
    for chain in chains:
        chain.problem = chains[0].problem
        chain.save()
    token_user, drf_user = make_member(project), make_member(project)
    token, _ = clients(token_user)
    _, drf = clients(drf_user)

    # When both ask for the next chain
    token_next, drf_next = (
        answer(token.post(next_url(project))),
        answer(drf.post(next_url(project))),
    )

    # Then the answers have the same shape and content, and the token one took its door
    assert token_next[0] == drf_next[0] == 200
    assert without_ids(token_next[1]) == without_ids(drf_next[1])
    assert door_calls == ["AssignmentNextView"]

    # When both submit, then repeat the submit with the same request_id
    results = {}
    for name, client, user, leased in (
        ("token", token, token_user, token_next[1]),
        ("drf", drf, drf_user, drf_next[1]),
    ):
        url = submit_url(leased["assignment"]["id"])
        body = ratings_body(leased["chain"]["id"], viewer=user.pk, request_id=f"r-{name}")
        results[name] = [answer(client.post(url, body, format="json")) for _ in range(2)]

    # Then: 201 twice with the same body (a repeat answers as the first submit did), the
    # same payloads both ways
    for name, (first, repeat) in results.items():
        assert (first[0], repeat[0]) == (201, 201), name
        assert first[1] == repeat[1]
    token_payload, drf_payload = results["token"][0][1], results["drf"][0][1]
    assert sorted(token_payload["annotation"]) == sorted(drf_payload["annotation"])
    assert [r["rating"] for r in token_payload["annotation"]["ratings"]] == [1, 1, 1]
    assert door_calls == ["AssignmentNextView", "AssignmentSubmitView", "AssignmentSubmitView"]
    assert Annotation.objects.filter(source="human").count() == 2

    # And then nothing is left: 204 both ways, with no body
    token_nothing, drf_nothing = token.post(next_url(project)), drf.post(next_url(project))
    assert answer(token_nothing) == answer(drf_nothing) == (204, None)
    assert token_nothing.get("Content-Type") == drf_nothing.get("Content-Type")


@pytest.mark.parametrize(
    "case",
    ["foreign_project", "bad_ratings", "closed_lease", "foreign_lease", "lost_lease"],
)
def test_errors_are_drfs(case: str, project, make_member, door_calls) -> None:
    # Given one annotator reached over a token and the same one over DRF's full cycle
    ChainFactory.create_batch(2, project=project, step_count=2)
    user = make_member(project)
    token, drf = clients(user)
    other = ProjectFactory()
    ChainFactory(project=other)

    def both(method: str, url: str, body: Any = None) -> tuple[Any, Any]:
        kwargs = {"format": "json"} if body is not None else {}
        return (
            answer(getattr(token, method)(url, body, **kwargs)),
            answer(getattr(drf, method)(url, body, **kwargs)),
        )

    if case == "foreign_project":
        got = both("post", next_url(other))
        expected_status = 404
    else:
        leased = drf.post(next_url(project)).json()
        url = submit_url(leased["assignment"]["id"])
        if case == "bad_ratings":
            got = both("post", url, {"ratings": [{"step": 10**9, "rating": 1}]})
            expected_status = 400
        elif case == "closed_lease":
            drf.post(url, ratings_body(leased["chain"]["id"], viewer=user.pk), format="json")
            got = both("post", url, ratings_body(leased["chain"]["id"], viewer=user.pk))
            expected_status = 409
        elif case == "foreign_lease":
            stranger_lease = Assignment.objects.create(
                project=other,
                chain=Chain.objects.filter(project=other).get(),
                annotator=make_member(other),
                expires_at=Assignment.objects.get(
                    pk=ASSIGNMENT_IDS.read(leased["assignment"]["id"], viewer=None)
                ).expires_at,
            )
            body = {"ratings": [{"step": 1, "rating": 1}]}
            got = both(
                "post", submit_url(ASSIGNMENT_IDS.show(stranger_lease.pk, viewer=None)), body
            )
            expected_status = 404
        else:  # lost_lease: expired, and its place went to someone else
            Assignment.objects.filter(
                pk=ASSIGNMENT_IDS.read(leased["assignment"]["id"], viewer=None)
            ).update(status=AssignmentStatus.EXPIRED)
            project.overlap = 1
            project.save()
            taker = make_member(project)
            Assignment.objects.create(
                project=project,
                chain_id=CHAIN_IDS.read(leased["chain"]["id"], viewer=user.pk),
                annotator=taker,
                expires_at=Assignment.objects.get(
                    pk=ASSIGNMENT_IDS.read(leased["assignment"]["id"], viewer=None)
                ).expires_at,
            )
            got = both("post", url, ratings_body(leased["chain"]["id"], viewer=user.pk))
            expected_status = 409

    # Then the token door gives DRF's status and body
    token_answer, drf_answer = got
    assert token_answer == drf_answer
    assert token_answer[0] == expected_status


def test_what_the_token_door_leaves_to_drf(project, make_member, door_calls) -> None:
    # Given an annotator with a lease, reached over a token
    ChainFactory.create_batch(2, project=project, step_count=2)
    user = make_member(project)
    token, _ = clients(user)
    leased = token.post(next_url(project)).json()
    url = submit_url(leased["assignment"]["id"])
    door_calls.clear()

    # When the token is unknown, the body is malformed or not JSON, or the client asks
    # for something other than JSON
    unknown = APIClient()
    unknown.credentials(HTTP_AUTHORIZATION="Token " + "0" * 40)
    unknown_next = unknown.post(next_url(project))
    malformed = token.post(url, b"{not json", content_type="application/json")
    form = token.post(url, {"ratings": "x"})
    html = token.post(next_url(project), HTTP_ACCEPT="text/html")

    # Then DRF answered each as it always has
    assert unknown_next.status_code == 401
    assert unknown_next["WWW-Authenticate"] == "Token"
    assert malformed.status_code == 400 and "JSON parse error" in malformed.json()["detail"]
    assert form.status_code == 415 or form.status_code == 400
    assert html.status_code == 200
    assert door_calls == []


def test_a_body_with_comments_and_a_rewrite_takes_the_token_door(
    project, make_member, door_calls
) -> None:
    # Given an annotator with a lease, reached over a token
    project.labeling_mode = "all_steps"
    project.save()
    ChainFactory(project=project, step_count=2)
    user = make_member(project)
    token, _ = clients(user)
    leased = token.post(next_url(project)).json()
    door_calls.clear()

    # When the body carries what only a serializer handled before: a comment to strip, a
    # rewrite, numbers as strings and a non-ASCII request id
    body = ratings_body(
        leased["chain"]["id"], value=-1, viewer=user.pk, rewrite=" fixed ", request_id="ü-1"
    )
    body["ratings"][0]["comment"] = "  a note  "
    body["ratings"][1]["step"] = str(body["ratings"][1]["step"])
    answered = token.post(submit_url(leased["assignment"]["id"]), body, format="json")

    # Then the token door answered it, as DRF's serializer fields read it
    assert answered.status_code == 201, answered.content
    annotation = answered.json()["annotation"]
    assert annotation["ratings"][0]["comment"] == "a note"
    assert annotation["rewrite"] == "fixed" and annotation["request_id"] == "ü-1"
    assert door_calls == ["AssignmentSubmitView"]
