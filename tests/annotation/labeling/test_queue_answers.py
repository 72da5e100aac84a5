"""The queue's answers, built by hand for speed, and the submit body's validator, which
runs the serializer's own fields without building a serializer per request: what they
give is what the schema's serializers describe."""

from __future__ import annotations

import json

import pytest
from rest_framework import serializers

from annotation.labeling.api.assignments import NextOutputSerializer, lease_payload
from annotation.labeling.api.submit_input import SubmitInputSerializer, submit_input_validate
from annotation.labeling.queue.claim import lease_next
from annotation.labeling.queue.leases import leased_chain
from annotation.models import Assignment, LabelingMode, Step
from tests.factories import ChainFactory, ProblemFactory

pytestmark = pytest.mark.django_db


def _described(payload: dict) -> None:
    """``payload`` has exactly the fields ``NextOutputSerializer`` describes."""
    described = NextOutputSerializer()
    assert set(payload) == set(described.fields)
    assert set(payload["assignment"]) == set(described.fields["assignment"].fields)
    chain = described.fields["chain"]
    assert set(payload["chain"]) == set(chain.fields)
    steps = chain.fields["steps"].child
    assert all(set(step) == set(steps.fields) for step in payload["chain"]["steps"])


@pytest.mark.parametrize("show_reference_answer", [True, False])
@pytest.mark.parametrize("mode", [LabelingMode.ALL_STEPS, LabelingMode.FIRST_ERROR])
def test_a_leases_answer(project, make_member, show_reference_answer, mode):
    # Given a leased chain whose problem and steps hold markup, quotes and non-ASCII text,
    # with steps inserted out of order
    project.show_reference_answer = show_reference_answer
    project.labeling_mode = mode
    project.save()
    problem = ProblemFactory(
        project=project, text='What is <b>2</b> × "3"?', reference_answer="$6$"
    )
    chain = ChainFactory(project=project, problem=problem, step_count=0, final_answer="6")
    for index in (2, 0, 1):
        Step.objects.create(chain=chain, index=index, text=f"Step {index}: ünï <i>x</i>")
    lease = lease_next(project=project, user=make_member(project))
    assert lease is not None

    # When its answer is built
    payload = lease_payload(lease=lease, project=project)

    # Then it holds what the schema describes: steps in index order with their text, the
    # reference answer only when shown, the mode, the expiry in UTC
    _described(payload)
    assert [step["index"] for step in payload["chain"]["steps"]] == [0, 1, 2]
    assert payload["chain"]["steps"][0]["text"] == "Step 0: ünï <i>x</i>"
    assert payload["chain"]["problem"]["text"] == 'What is <b>2</b> × "3"?'
    assert payload["chain"]["problem"].get("reference_answer") == (
        "$6$" if show_reference_answer else None
    )
    assert payload["chain"]["labeling_mode"] == mode
    assert payload["chain"]["final_answer"] == "6"
    assert payload["assignment"]["expires_at"].endswith("Z")
    # and what the claim read with the new lease is what a later read of the chain gives
    # (next again: the live lease, its chain read then)
    assert lease.chain == leased_chain(chain_id=chain.pk)
    again = lease_next(project=project, user=lease.assignment.annotator)
    assert again is not None and again.assignment.pk == lease.assignment.pk
    assert lease_payload(lease=again, project=project) == payload
    assert Assignment.objects.get(pk=lease.assignment.pk).chain_id == chain.pk


def test_a_leases_answer_for_a_chain_without_steps(project, make_member):
    # Given a leased chain that has no steps
    chain = ChainFactory(project=project, step_count=0, final_answer="7")
    lease = lease_next(project=project, user=make_member(project))
    assert lease is not None and lease.assignment.chain_id == chain.pk

    # When its answer is built; then it still names the problem and the final answer
    payload = lease_payload(lease=lease, project=project)
    assert payload["chain"]["steps"] == []
    assert payload["chain"]["problem"]["text"] == chain.problem.text
    assert payload["chain"]["final_answer"] == "7"
    assert lease.chain == leased_chain(chain_id=chain.pk)


# --- the submit body -----------------------------------------------------------------------

GOOD_BODIES = [
    {"ratings": [{"step": 1, "rating": 1}]},
    {"ratings": [{"step": 1, "rating": -1}, {"step": 2, "rating": 0}], "request_id": " ab-1 "},
    {
        "ratings": [{"step": 3, "rating": 1, "duration_ms": 0, "comment": ""}],
        "duration_ms": 2**31 - 1,
        "request_id": "",
        "rewrite": "",
    },
    {"ratings": [{"step": 3, "rating": 7, "duration_ms": None}], "duration_ms": None},
    {"ratings": [{"step": 1, "rating": 1, "comment": " why? "}]},  # a comment, stripped
    {"ratings": [{"step": 1, "rating": -1}], "rewrite": " fixed "},  # a rewrite
    {"ratings": [{"step": "1", "rating": "1"}]},  # numbers as strings: the fields convert
    {"ratings": [{"step": 1, "rating": 1}], "request_id": "ü"},  # a non-ASCII request id
]
BAD_BODIES = [
    {"ratings": []},
    {},
    {"ratings": None},
    {"ratings": [{"step": 1}]},
    {"ratings": [{"step": True, "rating": 1}]},
    {"ratings": [{"step": 1, "rating": 1, "duration_ms": -1}]},
    {"ratings": [{"step": 1, "rating": 1}, "two", {"step": 0, "rating": 1}]},
    {"ratings": [{"step": 1, "rating": 1}], "duration_ms": 2**31},
    {"ratings": [{"step": 1, "rating": 1}], "request_id": "x" * 101},
    {"ratings": [{"step": 1, "rating": 1}], "request_id": None},
    {"ratings": [{"step": 1, "rating": 1, "comment": "x" * 10_001}], "rewrite": 5},
    {"ratings": "all"},
    [],
    "ratings",
    {"ratings": [{"step": 1, "rating": 1}], "ignored": True},  # a field submit does not name
    {"ratings": [{"step": 1, "rating": 1, "why": "x"}]},  # ... nor a rating
]


def _as_json(value: object) -> object:
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("body", GOOD_BODIES)
def test_a_good_submit_body_reads_as_its_serializer_reads_it(body) -> None:
    # When a body is validated, and read by the serializer whose fields it runs
    validated = submit_input_validate(body)
    serializer = SubmitInputSerializer(data=body)

    # Then the values are the serializer's
    assert serializer.is_valid()
    assert _as_json(validated) == _as_json(serializer.validated_data)


@pytest.mark.parametrize("body", BAD_BODIES)
def test_a_bad_submit_body_gets_its_serializers_messages(body) -> None:
    # When a bad body is validated, and read by the serializer whose fields it runs
    with pytest.raises(serializers.ValidationError) as raised:
        submit_input_validate(body)
    serializer = SubmitInputSerializer(data=body)

    # Then it is refused with the serializer's messages, each where the serializer puts it
    assert not serializer.is_valid()
    assert _as_json(raised.value.detail) == _as_json(serializer.errors)


def test_a_long_chain_stores_every_rating_in_step_order(project, make_member) -> None:
    # Given a long chain (on SQLite, more than two insert batches of ratings; on
    # PostgreSQL, still one statement)
    from annotation.labeling.queue.submit import RatingInput, assignment_submit
    from annotation.labeling.queue.submit_writes import _RATINGS_PER_STATEMENT
    from annotation.models import StepRating
    from tests.annotation.labeling.claiming import assignment_claim_next

    steps = 2 * _RATINGS_PER_STATEMENT + 1
    chain = ChainFactory(project=project, step_count=0)
    Step.objects.bulk_create(Step(chain=chain, index=i, text=f"s{i}") for i in range(steps))
    user = make_member(project)
    lease = assignment_claim_next(project=project, user=user)
    assert lease is not None
    ids = list(chain.steps.order_by("index").values_list("pk", flat=True))

    # When every step is rated (in reverse order)
    submitted = assignment_submit(
        assignment_id=lease.pk,
        user=user,
        ratings=[RatingInput(step_id=i, rating=(i % 3) - 1) for i in reversed(ids)],
    )

    # Then all ratings are stored, as the answer reports them, in step order, and the lease
    # and the chain's count are written as on the one-statement path
    stored = list(
        StepRating.objects.filter(annotation=submitted.annotation).order_by("step__index")
    )
    assert [r.step_id for r in stored] == ids
    assert [(r.step_id, r.rating) for r in submitted.ratings] == [
        (r.step_id, r.rating) for r in stored
    ]
    assert [r.rating for r in stored] == [(i % 3) - 1 for i in ids]
    lease.refresh_from_db()
    chain.refresh_from_db()
    assert lease.status == "submitted" and lease.finished_at is not None
    assert chain.finished_count == 1
