"""`POST /api/v1/projects/{id}/history/{annotation_id}/revise/`: an annotator revises a
submitted pass over HTTP, steps named by the public ids the history showed; the reopened
chain says whether it is still open to change and why not."""

from __future__ import annotations

from typing import Any

import pytest

from annotation.datasets.snapshots import snapshot_create
from annotation.labeling.history import CLOSED_REPLACED, CLOSED_SNAPSHOT
from annotation.models import Annotation, Chain
from annotation.public_ids import STEP_IDS
from tests.factories import ChainFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


def url(project: Any, annotation_id: int, tail: str = "") -> str:
    return f"/api/v1/projects/{project.pk}/history/{annotation_id}/{tail}"


def body_for(chain: Chain, labels: list[int], *, viewer: int, **extra: Any) -> dict[str, Any]:
    """A revise body naming the chain's steps by their public ids as the annotator
    ``viewer`` (their user id, whose history it is) read them."""
    return {
        "ratings": [
            {"step": STEP_IDS.show(chain.pk, index, viewer=viewer), "rating": label}
            for index, label in enumerate(labels)
        ],
        **extra,
    }


def test_an_annotator_revises_a_pass_and_reopens_the_revision(project, make_member, client_for):
    # Given: a submitted pass, reopened: open to change
    me = make_member(project)
    chain = ChainFactory(project=project)
    mine = annotation_with_ratings(chain=chain, annotator=me, labels=[1, 1, 1])
    api = client_for(me)
    opened = api.get(url(project, mine.pk)).json()
    assert (opened["can_revise"], opened["closed_reason"], opened["supersedes"]) == (True, "", None)

    # When: they send the pass again with step 3 incorrect, a comment and a rewrite
    sent = body_for(chain, [1, 1, -1], viewer=me.pk, rewrite="So x = 3.")
    sent["ratings"][2]["comment"] = "off by one"
    response = api.post(url(project, mine.pk, "revise/"), sent, format="json")

    # Then: 201 with the new revision reopened, pointing at the pass it replaced
    assert response.status_code == 201, response.content
    revised = response.json()
    assert revised["annotation"] != mine.pk and revised["supersedes"] == mine.pk
    assert [s["rating"] for s in revised["steps"]] == [1, 1, -1]
    assert (revised["steps"][2]["comment"], revised["rewrite"]) == ("off by one", "So x = 3.")
    assert (revised["first_error"], revised["can_revise"]) == (3, True)
    # The old pass reopens read-only, pointing at its revision
    old = api.get(url(project, mine.pk)).json()
    assert (old["superseded_by"], old["can_revise"]) == (revised["annotation"], False)
    assert old["closed_reason"] == CLOSED_REPLACED
    assert [s["rating"] for s in old["steps"]] == [1, 1, 1]
    # The list holds the chain once, as revised
    listed = api.get(f"/api/v1/projects/{project.pk}/history/").json()["results"]
    assert [(e["annotation"], e["revised"], e["incorrect"]) for e in listed] == [
        (revised["annotation"], True, 1)
    ]
    # Sending to the old pass again (a second tab) is a 409 that says why
    again = api.post(url(project, mine.pk, "revise/"), sent, format="json")
    assert again.status_code == 409
    assert again.json() == {"detail": CLOSED_REPLACED, "code": "revision_closed"}
    assert Annotation.objects.filter(chain=chain).count() == 2


def test_a_rewrite_does_not_move_to_another_step_unless_the_annotator_says_so(
    project, make_member, client_for
):
    # Given: a pass whose first -1 is step 2, with a rewrite written for step 2
    me = make_member(project)
    chain = ChainFactory(project=project, step_count=4)
    mine = annotation_with_ratings(chain=chain, annotator=me, labels=[1, -1, -1, 1])
    Annotation.objects.filter(pk=mine.pk).update(rewrite="So 12 + 6 = 18.")
    api = client_for(me)

    # When: a revision makes step 3 the first -1 and sends the rewrite unchanged
    moved = body_for(chain, [1, 1, -1, 1], viewer=me.pk, rewrite="So 12 + 6 = 18.")
    refused = api.post(url(project, mine.pk, "revise/"), moved, format="json")

    # Then: 400, naming both steps; nothing is written
    assert refused.status_code == 400, refused.content
    assert "written for step 2" in refused.json()["rewrite"][0]
    assert "step 3 is the first now" in refused.json()["rewrite"][0]
    assert Annotation.objects.filter(chain=chain).count() == 1

    # When: the same revision says the text now belongs to step 3, or leaves it out
    kept = api.post(
        url(project, mine.pk, "revise/"), {**moved, "rewrite_moved": True}, format="json"
    )

    # Then: saved, the rewrite on the new first -1
    assert kept.status_code == 201, kept.content
    assert (kept.json()["rewrite"], kept.json()["first_error"]) == ("So 12 + 6 = 18.", 3)


def test_someone_else_s_pass_is_a_404_and_bad_ratings_a_400(project, make_member, client_for):
    me, other, lead = make_member(project), make_member(project), make_member(project, "lead")
    chain = ChainFactory(project=project)
    mine = annotation_with_ratings(chain=chain, annotator=me, labels=[1, 1, 1])
    good = body_for(chain, [1, 1, 1], viewer=me.pk)

    target = url(project, mine.pk, "revise/")
    for user in (other, lead):
        assert client_for(user).post(target, good, format="json").status_code == 404
    bad = client_for(me).post(target, body_for(chain, [1, 1], viewer=me.pk), format="json")
    assert bad.status_code == 400
    assert "missing: step 3" in str(bad.json()["ratings"])
    assert Annotation.objects.filter(chain=chain).count() == 1


def test_a_closed_pass_says_why_and_refuses(project, make_member, client_for):
    me, lead = make_member(project), make_member(project, "lead")
    chain = ChainFactory(project=project)
    mine = annotation_with_ratings(chain=chain, annotator=me, labels=[1, 1, 1])
    snapshot_create(project=project, user=lead, finished_only=False)
    api = client_for(me)

    opened = api.get(url(project, mine.pk)).json()
    refused = api.post(
        url(project, mine.pk, "revise/"), body_for(chain, [1, 1, 0], viewer=me.pk), format="json"
    )

    assert (opened["can_revise"], opened["closed_reason"]) == (False, CLOSED_SNAPSHOT)
    assert refused.status_code == 409 and refused.json()["detail"] == CLOSED_SNAPSHOT
    # A lead reads the pass and why it is closed, and is never offered to revise it
    as_lead = client_for(lead).get(url(project, mine.pk)).json()
    assert (as_lead["can_revise"], as_lead["closed_reason"]) == (False, CLOSED_SNAPSHOT)
