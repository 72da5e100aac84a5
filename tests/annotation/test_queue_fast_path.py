"""The next endpoint builds its answer by hand (``lease_payload``) for speed; it must stay
exactly what the documented serializer (``NextOutputSerializer``) gives."""
from __future__ import annotations

import pytest

from annotation.api.assignments import NextOutputSerializer, lease_payload
from annotation.models import Chain, LabelingMode, Step
from annotation.services.assignments import assignment_claim_next
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
