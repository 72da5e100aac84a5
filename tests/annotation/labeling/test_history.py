"""An annotator's own history: the selectors (order, keyset pages, only one's own, query
counts) and the API (who may read whose history, the payloads), and the page's access."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.test import Client

from annotation.labeling.history import (
    annotator_history_chain,
    annotator_history_page,
    history_annotator_resolve,
)
from annotation.models import Annotation, Project, StepRating
from annotation.public_ids import CHAIN_IDS
from annotation.quality.review import AdjudicatedRating, adjudication_create
from tests.factories import ChainFactory, ProblemFactory, ProjectFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


def submitted(
    project: Project, annotator: Any, labels: list[int | None], problem: str = ""
) -> Annotation:
    """A chain of len(labels) steps in ``project`` that ``annotator`` submitted."""
    chain = ChainFactory(
        project=project,
        step_count=len(labels),
        problem=ProblemFactory(project=project, text=problem or "What is 6 x 7?\nShow work."),
    )
    return annotation_with_ratings(chain=chain, annotator=annotator, labels=labels)


# --- selectors ---------------------------------------------------------------------------


def test_history_lists_own_submits_newest_first_with_their_summary(
    project: Project, make_member: Any
) -> None:
    # Given: an annotator's three submits, another annotator's, an import and a submit of
    # the same annotator in another project
    me, other = make_member(project), make_member(project)
    first = submitted(project, me, [1, 1, 1], problem="  \nFirst problem $x^2$\nsecond line")
    second = submitted(project, me, [1, 0, -1, None])
    StepRating.objects.filter(annotation=second, step__index=0).update(comment="why?")
    Annotation.objects.filter(pk=second.pk).update(rewrite="Fixed step.")
    third = submitted(project, me, [-1])
    submitted(project, other, [1, 1, 1])
    annotation_with_ratings(chain=first.chain, labels=[1, 1, 1])  # an import's labels
    elsewhere = ProjectFactory()
    submitted(elsewhere, me, [1])

    # When
    page = annotator_history_page(project=project, annotator=me)

    # Then: only mine in this project, newest first, each summed up
    assert [e.annotation_id for e in page.entries] == [third.pk, second.pk, first.pk]
    assert page.next_before is None
    assert (page.annotator_id, page.annotator_username) == (me.pk, me.username)
    newest, middle, oldest = page.entries
    assert (newest.steps_rated, newest.incorrect, newest.first_error) == (1, 1, 1)
    assert (middle.step_count, middle.steps_rated) == (4, 3)
    assert (middle.correct, middle.ambiguous, middle.incorrect) == (1, 1, 1)
    assert (middle.first_error, middle.comments, middle.rewritten) == (3, 1, True)
    assert oldest.problem_line == "First problem $x^2$"
    assert (oldest.correct, oldest.first_error, oldest.rewritten) == (3, None, False)
    assert oldest.chain_id == first.chain_id
    assert oldest.submitted_at == first.created_at


def test_keyset_pages_walk_the_whole_history_once(
    project: Project, make_member: Any, django_assert_num_queries: Any
) -> None:
    # Given: seven submits
    me = make_member(project)
    ids = [submitted(project, me, [1]).pk for _ in range(7)]

    # When: read three at a time, each page in two queries
    seen, before, pages = [], None, 0
    while True:
        with django_assert_num_queries(2):
            page = annotator_history_page(project=project, annotator=me, before=before, limit=3)
        seen += [e.annotation_id for e in page.entries]
        pages += 1
        before = page.next_before
        if before is None:
            break

    # Then: every submit once, newest first, in three pages (3, 3, 1)
    assert seen == sorted(ids, reverse=True)
    assert pages == 3


def test_a_page_stays_put_while_new_submits_arrive(project: Project, make_member: Any) -> None:
    me = make_member(project)
    ids = [submitted(project, me, [1]).pk for _ in range(4)]
    page = annotator_history_page(project=project, annotator=me, limit=2)
    submitted(project, me, [1])  # a new submit between two pages
    older = annotator_history_page(project=project, annotator=me, before=page.next_before)
    assert [e.annotation_id for e in older.entries] == [ids[1], ids[0]]


def test_a_long_problem_line_is_cut(project: Project, make_member: Any) -> None:
    me = make_member(project)
    submitted(project, me, [1], problem="x" * 5000)
    (entry,) = annotator_history_page(project=project, annotator=me).entries
    assert len(entry.problem_line) == 200 and entry.problem_line.endswith("…")


@pytest.mark.parametrize(
    ("labels", "shown"),
    [
        ([1, 1, 1], None),  # no error named
        ([1, None, -1], 3),  # a step left unrated before the -1 does not hide it
        ([0, -1, -1], 2),  # the first -1, counted from 1
        ([None, None], None),  # nothing rated
    ],
)
def test_a_reopened_pass_shows_the_first_step_it_rated_wrong(
    project: Project, make_member: Any, labels: list[int | None], shown: int | None
) -> None:
    me = make_member(project)
    mine = submitted(project, me, labels)
    chain = annotator_history_chain(project=project, user=me, annotation_id=mine.pk)
    assert chain.first_error == shown


def test_reopened_chain_carries_own_ratings_comments_and_rewrite(
    project: Project, make_member: Any, django_assert_num_queries: Any
) -> None:
    # Given: a first_error pass with a comment and a rewrite, and another annotator's pass
    project.show_reference_answer = False
    project.save()
    me, other = make_member(project), make_member(project)
    mine = submitted(project, me, [1, -1, None])
    StepRating.objects.filter(annotation=mine, step__index=1).update(comment="sign error")
    Annotation.objects.filter(pk=mine.pk).update(rewrite="So $x = -2$.")
    annotation_with_ratings(chain=mine.chain, annotator=other, labels=[-1, -1, -1])

    # When
    with django_assert_num_queries(4):  # and whether it is open to change
        chain = annotator_history_chain(project=project, user=me, annotation_id=mine.pk)

    # Then: my ratings only, the step without one as None, no reference answer
    assert [(s.index, s.rating, s.comment) for s in chain.steps] == [
        (0, 1, ""),
        (1, -1, "sign error"),
        (2, None, ""),
    ]
    assert (chain.first_error, chain.rewrite) == (2, "So $x = -2$.")
    assert chain.reference_answer is None
    assert chain.problem_text == mine.chain.problem.text
    assert chain.final_answer == mine.chain.final_answer


def test_reopening_someone_else_s_annotation_is_not_found(
    project: Project, make_member: Any
) -> None:
    me, other, lead = make_member(project), make_member(project), make_member(project, "lead")
    theirs = submitted(project, other, [1, 1, 1])
    imported = annotation_with_ratings(chain=theirs.chain, labels=[1, 1, 1])
    adjudication = adjudication_create(
        chain=theirs.chain,
        lead=lead,
        ratings=[AdjudicatedRating(step_id=s.pk, rating=1) for s in theirs.chain.steps.all()],
        note="",
    )
    for annotation_id in (theirs.pk, imported.pk, adjudication.pk):
        with pytest.raises(Http404):
            annotator_history_chain(project=project, user=me, annotation_id=annotation_id)
    # A lead reopens a member's pass, never an import or a ruling through the history.
    assert annotator_history_chain(
        project=project, user=lead, annotation_id=theirs.pk, lead=True
    ).annotator_id == (other.pk)
    with pytest.raises(Http404):
        annotator_history_chain(project=project, user=lead, annotation_id=imported.pk, lead=True)
    # Nor one of another project.
    with pytest.raises(Http404):
        annotator_history_chain(
            project=ProjectFactory(), user=other, annotation_id=theirs.pk, lead=True
        )


def test_whose_history_a_member_may_read(project: Project, make_member: Any) -> None:
    me, other = make_member(project), make_member(project)
    lead, ml = make_member(project, "lead"), make_member(project, "ml")
    outsider = make_member(ProjectFactory())
    assert history_annotator_resolve(project=project, user=me, annotator_id=None) == me
    assert history_annotator_resolve(project=project, user=me, annotator_id=me.pk) == me
    assert history_annotator_resolve(project=project, user=lead, annotator_id=other.pk) == other
    for caller in (me, ml):
        with pytest.raises(PermissionDenied):
            history_annotator_resolve(project=project, user=caller, annotator_id=other.pk)
    with pytest.raises(Http404):
        history_annotator_resolve(project=project, user=lead, annotator_id=outsider.pk)


# --- API ---------------------------------------------------------------------------------


def history_url(project: Project, suffix: str = "") -> str:
    return f"/api/v1/projects/{project.pk}/history/{suffix}"


def test_api_lists_the_caller_s_history_with_a_cursor(
    project: Project, make_member: Any, client_for: Any
) -> None:
    # Given: three submits of mine and one of someone else
    me = make_member(project)
    mine = [submitted(project, me, [1, 0, -1]).pk for _ in range(3)]
    submitted(project, make_member(project), [1, 1, 1])
    api = client_for(me)

    # When: two pages of two
    first = api.get(history_url(project), {"limit": 2})
    second = api.get(history_url(project), {"limit": 2, "cursor": first.json()["next_cursor"]})

    # Then
    assert first.status_code == 200 and second.status_code == 200
    body = first.json()
    assert body["annotator"] == {"id": me.pk, "username": me.username}
    assert [e["annotation"] for e in body["results"]] == [mine[2], mine[1]]
    assert body["next_cursor"] == str(mine[1])
    assert set(body["results"][0]) == {
        "annotation",
        "chain",
        "submitted_at",
        "problem",
        "step_count",
        "steps_rated",
        "correct",
        "ambiguous",
        "incorrect",
        "first_error",
        "comments",
        "rewritten",
        "revised",
    }
    entry = body["results"][0]
    assert (entry["correct"], entry["ambiguous"], entry["incorrect"]) == (1, 1, 1)
    assert (entry["steps_rated"], entry["first_error"], entry["problem"]) == (
        3,
        3,
        "What is 6 x 7?",
    )
    assert [e["annotation"] for e in second.json()["results"]] == [mine[0]]
    assert second.json()["next_cursor"] is None


@pytest.mark.parametrize(
    ("role", "own", "other"),
    [("annotator", 200, 403), ("ml", 200, 403), ("lead", 200, 200), ("outsider", 404, 404)],
)
def test_api_status_codes_by_role(
    project: Project, make_member: Any, client_for: Any, role: str, own: int, other: int
) -> None:
    # Given: an annotator's submit, and a caller of each role
    annotator = make_member(project)
    annotation = submitted(project, annotator, [1, 1, 1])
    caller = make_member(ProjectFactory(), "lead") if role == "outsider" else None
    caller = caller or make_member(project, role)
    api = client_for(caller)

    # Then: everyone but the outsider reads their own; only the lead reads the annotator's
    assert api.get(history_url(project)).status_code == own
    listed = api.get(history_url(project), {"annotator": annotator.pk})
    assert listed.status_code == other
    reopened = api.get(history_url(project, f"{annotation.pk}/"))
    assert reopened.status_code == (200 if role == "lead" else 404)
    if role == "lead":
        assert [e["annotation"] for e in listed.json()["results"]] == [annotation.pk]
        assert listed.json()["annotator"]["username"] == annotator.username


def test_api_refuses_bad_query_values(project: Project, make_member: Any, client_for: Any) -> None:
    api = client_for(make_member(project))
    bad = ({"limit": 0}, {"limit": 201}, {"cursor": "x"}, {"cursor": "9" * 19}, {"annotator": -1})
    for params in bad:
        assert api.get(history_url(project), params).status_code == 400, params
    lead = client_for(make_member(project, "lead"))
    stranger = make_member(ProjectFactory())
    assert lead.get(history_url(project), {"annotator": stranger.pk}).status_code == 404
    assert client_for(stranger).get(history_url(project)).status_code == 404


def test_api_reopens_own_chain_with_ratings(
    project: Project, make_member: Any, client_for: Any
) -> None:
    me = make_member(project)
    mine = submitted(project, me, [1, -1, None], problem="Find $x$.")
    StepRating.objects.filter(annotation=mine, step__index=1).update(comment="wrong sign")
    Annotation.objects.filter(pk=mine.pk).update(rewrite="So $x=2$.", duration_ms=4200)

    response = client_for(me).get(history_url(project, f"{mine.pk}/"))

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {
        "annotation",
        "annotator",
        "submitted_at",
        "duration_ms",
        "labeling_mode",
        "chain",
        "problem",
        "reference_answer",
        "final_answer",
        "steps",
        "rewrite",
        "first_error",
        "supersedes",
        "superseded_by",
        "can_revise",
        "closed_reason",
    }
    assert (body["annotation"], body["chain"], body["problem"]) == (
        mine.pk,
        CHAIN_IDS.show(mine.chain_id, viewer=me.pk),
        "Find $x$.",
    )
    assert [(s["index"], s["rating"], s["comment"]) for s in body["steps"]] == [
        (0, 1, ""),
        (1, -1, "wrong sign"),
        (2, None, ""),
    ]
    assert (body["rewrite"], body["first_error"], body["duration_ms"]) == ("So $x=2$.", 2, 4200)
    assert body["reference_answer"] == mine.chain.problem.reference_answer
    assert not {key for key in body if "gold" in key}


# --- the page ----------------------------------------------------------------------------


def test_page_access_and_configuration(project: Project, make_member: Any) -> None:
    me, other, lead = make_member(project), make_member(project), make_member(project, "lead")
    page = Client()
    page.force_login(me)
    url = f"/projects/{project.pk}/history/"
    response = page.get(url)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Your history" in html and 'id="history-config"' in html
    assert f"/api/v1/projects/{project.pk}/history/" in html
    assert page.get(url, {"annotator": other.pk}).status_code == 403
    assert page.get(url, {"annotator": "abc"}).status_code == 404
    # a digit Python reads but int() refuses, and an id past a bigint: no such member
    assert page.get(url, {"annotator": "²"}).status_code == 404
    as_lead = Client()
    as_lead.force_login(lead)
    assert as_lead.get(url, {"annotator": "9" * 20}).status_code == 404
    response = as_lead.get(url, {"annotator": other.pk})
    assert response.status_code == 200
    assert f"History of {other.username}" in response.content.decode()
    outsider = Client()
    outsider.force_login(make_member(ProjectFactory()))
    assert outsider.get(url).status_code == 404


def test_workspace_and_overview_link_to_the_history(project: Project, make_member: Any) -> None:
    page = Client()
    page.force_login(make_member(project))
    target = f'href="/projects/{project.pk}/history/"'
    workspace = page.get(f"/projects/{project.pk}/label/").content.decode()
    assert workspace.count(target) == 2  # the header, and the empty queue's summary
    assert target in page.get(f"/projects/{project.pk}/").content.decode()


def test_a_lead_s_dashboard_links_each_member_to_their_history(
    project: Project, make_member: Any
) -> None:
    annotator, lead = make_member(project), make_member(project, "lead")
    page = Client()
    page.force_login(lead)
    html = page.get(f"/projects/{project.pk}/").content.decode()
    assert f'href="/projects/{project.pk}/history/?annotator={annotator.pk}"' in html
    page.force_login(annotator)
    assert "?annotator=" not in page.get(f"/projects/{project.pk}/").content.decode()
