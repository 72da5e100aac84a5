"""The next endpoint builds its answer by hand (``lease_payload``) for speed; it must stay
exactly what the documented serializer (``NextOutputSerializer``) gives."""

from __future__ import annotations

import json

import pytest

from annotation.api.assignments import NextOutputSerializer, lease_payload
from annotation.models import Chain, LabelingMode, Step
from annotation.queue.claim import assignment_claim_next
from tests.factories import ChainFactory, ProblemFactory

pytestmark = pytest.mark.django_db


def _serialized(assignment, project) -> dict:
    # What the serializer gives from freshly loaded rows, with no cached relations.
    assignment.chain = Chain.objects.select_related("problem").get(pk=assignment.chain_id)
    return NextOutputSerializer(assignment, context={"project": project}).data


@pytest.mark.parametrize("show_reference_answer", [True, False])
@pytest.mark.parametrize("mode", [LabelingMode.ALL_STEPS, LabelingMode.FIRST_ERROR])
def test_lease_payload_matches_the_serializer(project, make_member, show_reference_answer, mode):
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
    lease = assignment_claim_next(project=project, user=make_member(project))
    assert lease is not None

    # When the answer is built by hand and by the serializer
    fast = lease_payload(assignment=lease, project=project)
    slow = _serialized(lease, project)

    # Then they are equal, steps in index order, the reference answer only when shown
    assert fast == slow
    assert [step["index"] for step in fast["chain"]["steps"]] == [0, 1, 2]
    assert ("reference_answer" in fast["chain"]["problem"]) is show_reference_answer
    assert fast["chain"]["labeling_mode"] == mode
    assert fast["assignment"]["expires_at"].endswith("Z")
    # and the rows the claim read with the new lease give what a later read of it gives
    from annotation.models import Assignment

    assert lease.chain_rows
    stored = Assignment.objects.get(pk=lease.pk)
    assert not hasattr(stored, "chain_rows")
    assert lease_payload(assignment=stored, project=project) == fast


def test_lease_payload_of_a_chain_without_steps(project, make_member):
    # Given a leased chain that has no steps
    chain = ChainFactory(project=project, step_count=0, final_answer="7")
    lease = assignment_claim_next(project=project, user=make_member(project))
    assert lease is not None and lease.chain_id == chain.pk

    # When its answer is built; then it still names the problem and the final answer
    fast = lease_payload(assignment=lease, project=project)
    assert fast == _serialized(lease, project)
    assert fast["chain"]["steps"] == []
    assert fast["chain"]["problem"]["text"] == chain.problem.text
    assert fast["chain"]["final_answer"] == "7"


# --- the submit body -----------------------------------------------------------------------

FAST_BODIES = [
    {"ratings": [{"step": 1, "rating": 1}]},
    {"ratings": [{"step": 1, "rating": -1}, {"step": 2, "rating": 0}], "request_id": " ab-1 "},
    {
        "ratings": [{"step": 3, "rating": 1, "duration_ms": 0, "comment": ""}],
        "duration_ms": 2**31 - 1,
        "request_id": "",
        "rewrite": "",
        "ignored": True,
    },
    {"ratings": [{"step": 3, "rating": 7, "duration_ms": None}], "duration_ms": None},
]
SLOW_BODIES = [
    {"ratings": [{"step": 1, "rating": 1, "comment": " why? "}]},  # a comment
    {"ratings": [{"step": 1, "rating": -1}], "rewrite": "fixed"},  # a rewrite
    {"ratings": [{"step": "1", "rating": "1"}]},  # numbers as strings: DRF converts them
    {"ratings": [{"step": 1, "rating": 1}], "request_id": "ü"},  # non-ASCII request id
]
BAD_BODIES = [
    {"ratings": []},
    {"ratings": [{"step": 1}]},
    {"ratings": [{"step": True, "rating": 1}]},
    {"ratings": [{"step": 1, "rating": 1, "duration_ms": -1}]},
    {"ratings": [{"step": 1, "rating": 1}], "duration_ms": 2**31},
    {"ratings": [{"step": 1, "rating": 1}], "request_id": "x" * 101},
    {"ratings": [{"step": 1, "rating": 1}], "request_id": None},
    {"ratings": "all"},
    [],
]


def _serializer(data):
    from annotation.api.assignments import SubmitInputSerializer

    payload = SubmitInputSerializer(data=data)
    return payload.validated_data if payload.is_valid() else None


@pytest.mark.parametrize(
    ("kind", "body"),
    [("fast", b) for b in FAST_BODIES]
    + [("slow", b) for b in SLOW_BODIES]
    + [("bad", b) for b in BAD_BODIES],
)
def test_submit_input_fast_path_matches_the_serializer(kind, body) -> None:
    from annotation.api.assignments import _submit_input_fast

    # When a body is checked by hand and by the documented serializer
    fast = _submit_input_fast(body)
    slow = _serializer(body)

    # Then the hand path takes the plain bodies, giving the same values, and leaves the
    # rest (and every invalid one) to the serializer
    if kind == "fast":
        assert fast is not None and slow is not None
        assert json.loads(json.dumps(fast)) == json.loads(json.dumps(slow))
    else:
        assert fast is None
    assert (slow is None) == (kind == "bad")


def test_a_long_chain_stores_every_rating_in_step_order(project, make_member) -> None:
    # Given a long chain (on SQLite, more than two insert batches of ratings; on
    # PostgreSQL, still one statement)
    from annotation.models import StepRating
    from annotation.queue.submit import _RATINGS_PER_STATEMENT, RatingInput, assignment_submit

    steps = 2 * _RATINGS_PER_STATEMENT + 1
    chain = ChainFactory(project=project, step_count=0)
    Step.objects.bulk_create(Step(chain=chain, index=i, text=f"s{i}") for i in range(steps))
    user = make_member(project)
    lease = assignment_claim_next(project=project, user=user)
    assert lease is not None
    ids = list(chain.steps.order_by("index").values_list("pk", flat=True))

    # When every step is rated (in reverse order)
    annotation = assignment_submit(
        assignment_id=lease.pk,
        user=user,
        ratings=[RatingInput(step_id=i, rating=(i % 3) - 1) for i in reversed(ids)],
    )

    # Then all ratings are stored, as the answer reports them, in step order, and the lease
    # and the chain's count are written as on the one-statement path
    stored = list(StepRating.objects.filter(annotation=annotation).order_by("step__index"))
    assert [r.step_id for r in stored] == ids
    assert [(r.step_id, r.rating) for r in annotation.rating_rows] == [
        (r.step_id, r.rating) for r in stored
    ]
    assert [r.rating for r in stored] == [(i % 3) - 1 for i in ids]
    lease.refresh_from_db()
    chain.refresh_from_db()
    assert lease.status == "submitted" and lease.finished_at is not None
    assert chain.finished_count == 1
