"""The data manager sorted by each column it shows: keyset pages in every order and both
directions, ties broken by id, chains without a value last, each chain once; cursors
refused for another order; the stored agreement kept by the submit and gold services."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.chains.order import SORT_KEYS, ChainCursor, ChainOrder
from annotation.chains.selectors import (
    ChainFilters,
    ChainStatus,
    chain_list,
    chain_order_phases,
)
from annotation.labeling.queue.claim import lease_next
from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.models import Assignment, AssignmentStatus, Chain, Role
from annotation.quality.chain_agreement import chains_agreement_refresh
from annotation.quality.gold import gold_mark, gold_unmark
from annotation.quality.review import AdjudicatedRating, adjudication_create
from prm_training.models import ChainScore, RunStatus
from tests.factories import (
    ChainFactory,
    MembershipFactory,
    ProjectFactory,
    UserFactory,
    annotation_with_ratings,
    scoring_run_with_model_version,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def sortable():
    """Twenty chains whose values repeat (ties on every column), some without an
    agreement or a PRM score, one of each status; and a chain of another project."""
    project = ProjectFactory(overlap=2)
    people = [UserFactory() for _ in range(3)]
    run = scoring_run_with_model_version(
        project=project, content_hash="h", status=RunStatus.SUCCEEDED, finished_at=timezone.now()
    )
    chains = [ChainFactory(project=project, step_count=3) for _ in range(20)]
    for number, chain in enumerate(chains):
        passes = number % 4  # 0..3 passes: ties on passes, agreement null under two
        for person in people[:passes]:
            labels = [1, 1, -1] if (person == people[1] and number % 3 == 0) else [1, 1, 1]
            annotation_with_ratings(chain=chain, labels=labels, annotator=person)
        if number % 5 != 4:  # every fifth chain unscored
            score = [0.2, 0.5, 0.5, 0.9][number % 4]
            ChainScore.objects.create(
                scoring_run=run,
                chain=chain,
                step_probs=[score] * 3,
                chain_score=score,
                chain_uncertainty=round(1 - abs(2 * score - 1), 12),
            )
        Chain.objects.filter(pk=chain.pk).update(finished_count=passes, is_finished=passes >= 2)
    Chain.objects.filter(pk=chains[1].pk).update(is_flagged=True, flag_reason="garbled")
    Assignment.objects.create(
        project=project,
        chain=chains[4],
        annotator=people[0],
        expires_at=timezone.now() + timedelta(minutes=5),
    )
    Assignment.objects.create(
        project=project,
        chain=chains[8],
        annotator=people[2],
        status=AssignmentStatus.SKIPPED,
        expires_at=timezone.now(),
    )
    annotation_with_ratings(chain=chains[16], labels=[1, 1, 1])
    gold_mark(project=project, chain_ids=[chains[16].pk])
    # A disputed chain a lead ruled on: resolved.
    adjudication_create(
        chain=chains[18],
        lead=UserFactory(),
        ratings=[AdjudicatedRating(step_id=chains[18].steps.get(index=2).pk, rating=-1)],
    )
    chains_agreement_refresh(chains=Chain.objects.filter(project=project))
    ChainFactory(step_count=1)  # another project's
    return project


def _walk(project, order: ChainOrder, *, limit: int, **filters: Any) -> list[Any]:
    rows: list[Any] = []
    cursor = None
    for _ in range(100):
        page = chain_list(
            project=project,
            filters=ChainFilters(**filters),
            order=order,
            cursor=cursor,
            limit=limit,
        )
        rows += page.rows
        if page.next_cursor is None:
            return rows
        cursor = page.next_cursor
    raise AssertionError("the pages never ended")


def _value(row: Any, key: str) -> Any:
    if key == "id":
        return None
    if key == "passes":
        return row.finished_count
    if key == "status":
        return ChainStatus.ALL.index(row.status)
    return getattr(row, key)


def _expected(rows: list[Any], order: ChainOrder) -> list[int]:
    """The order by (value, id), either way, with rows that have no value last by id."""
    valued = [row for row in rows if _value(row, order.key) is not None]
    empty = [row for row in rows if _value(row, order.key) is None]
    valued.sort(key=lambda row: (_value(row, order.key), row.chain_id), reverse=order.descending)
    empty.sort(key=lambda row: row.chain_id, reverse=order.descending)
    return [row.chain_id for row in valued + empty]


def test_every_order_pages_through_every_chain_once_in_order(sortable) -> None:
    everything = chain_list(project=sortable, filters=ChainFilters(), limit=200).rows
    for key, descending, limit in itertools.product(SORT_KEYS, (False, True), (1, 6)):
        order = ChainOrder(key=key, descending=descending)

        walked = _walk(sortable, order, limit=limit)

        assert [row.chain_id for row in walked] == _expected(everything, order), (order, limit)
        assert len(walked) == len(everything) == 20


def test_the_fixture_has_ties_and_empty_values_on_every_sorted_column(sortable) -> None:
    rows = chain_list(project=sortable, filters=ChainFilters(), limit=200).rows
    for key in ("passes", "agreement", "prm_score", "prm_uncertainty", "status"):
        values = [_value(row, key) for row in rows if _value(row, key) is not None]
        assert len(values) > len(set(values)), key  # ties to break by id
    for key in ("agreement", "prm_score", "prm_uncertainty"):
        assert any(_value(row, key) is None for row in rows), key
    assert {row.status for row in rows} == set(ChainStatus.ALL)


def test_a_filtered_sorted_list_pages_through_its_matches_only(sortable) -> None:
    finished = [
        row
        for row in chain_list(project=sortable, filters=ChainFilters(), limit=200).rows
        # (the resolved chain is finished too: its passes reached the overlap)
        if row.status in (ChainStatus.FINISHED, ChainStatus.DISPUTED, ChainStatus.RESOLVED)
    ]
    for key in ("status", "agreement", "prm_score", "passes"):
        order = ChainOrder(key=key, descending=True)

        walked = _walk(sortable, order, limit=2, statuses=(ChainStatus.FINISHED,))

        assert [row.chain_id for row in walked] == _expected(finished, order), key


def test_sorting_by_a_prm_column_without_a_scoring_run_lists_every_chain_by_id() -> None:
    project = ProjectFactory()
    ids = [ChainFactory(project=project).pk for _ in range(4)]

    walked = _walk(project, ChainOrder(key="prm_score", descending=True), limit=3)

    assert [row.chain_id for row in walked] == sorted(ids, reverse=True)


def test_a_sorted_page_costs_three_queries_when_its_first_phase_fills_it(sortable) -> None:
    # The newest scoring run, the page, and the page's machine first errors.
    for key in ("id", "passes", "agreement", "prm_score"):
        order = ChainOrder(key=key, descending=True)
        with CaptureQueriesContext(connection) as queries:
            chain_list(project=sortable, filters=ChainFilters(), order=order, limit=3)
        assert len(queries) == 3, (key, [query["sql"][:120] for query in queries])


def test_a_cursor_names_its_order_and_is_refused_for_another(sortable) -> None:
    order = ChainOrder(key="agreement")
    page = chain_list(project=sortable, filters=ChainFilters(), order=order, limit=2)
    assert page.next_cursor is not None
    text = page.next_cursor.encode(order)
    phases = len(chain_order_phases(project=sortable, order=order))

    assert ChainCursor.decode(text, order=order, phases=phases) == page.next_cursor
    with pytest.raises(ValueError, match="another|not"):
        ChainCursor.decode(text, order=ChainOrder(key="agreement", descending=True), phases=2)
    for bad in ("", "x", "e30", text[:-2], "WyJpZCIsIDAsIG51bGwsIDBd"):  # the last: id 0
        with pytest.raises(ValueError):
            ChainCursor.decode(bad, order=order, phases=phases)


# --------------------------------------------------------------------------- API


def _lead(project) -> APIClient:
    client = APIClient()
    client.force_authenticate(MembershipFactory(project=project, role=Role.LEAD).user)
    return client


def test_api_sorts_and_pages_with_the_cursor(sortable) -> None:
    lead = _lead(sortable)
    url = f"/api/v1/projects/{sortable.pk}/chains/"
    everything = chain_list(project=sortable, filters=ChainFilters(), limit=200).rows
    expected = _expected(everything, ChainOrder(key="prm_uncertainty", descending=True))

    seen: list[int] = []
    params: dict[str, Any] = {"sort": "-prm_uncertainty", "limit": 4}
    while True:
        body = lead.get(url, params).json()
        seen += [row["id"] for row in body["results"]]
        assert body["next_after"] is None  # not the id order
        if body["next_cursor"] is None:
            break
        params["cursor"] = body["next_cursor"]

    assert seen == expected


def test_api_refuses_a_bad_sort_or_cursor(sortable) -> None:
    lead = _lead(sortable)
    url = f"/api/v1/projects/{sortable.pk}/chains/"
    cursor = lead.get(url, {"sort": "agreement", "limit": 1}).json()["next_cursor"]

    assert lead.get(url, {"sort": "problem"}).status_code == 400
    assert lead.get(url, {"sort": "-agreement", "cursor": cursor}).status_code == 400
    assert lead.get(url, {"sort": "agreement", "cursor": "not a cursor"}).status_code == 400
    assert lead.get(url, {"sort": "agreement", "after": 5}).status_code == 400
    assert lead.get(url, {"sort": "agreement", "cursor": cursor}).status_code == 200
    # In the id order the old `after` still pages, and so does the cursor.
    first = lead.get(url, {"limit": 2}).json()
    by_after = lead.get(url, {"limit": 2, "after": first["next_after"]}).json()
    by_cursor = lead.get(url, {"limit": 2, "cursor": first["next_cursor"]}).json()
    assert by_after["results"] == by_cursor["results"]


# --------------------------------------------------------------------------- the stored agreement


def _submit(project, user, labels: list[int]) -> Chain:
    lease = lease_next(project=project, user=user)
    assert lease is not None
    steps = list(Chain.objects.get(pk=lease.assignment.chain_id).steps.order_by("index"))
    assignment_submit(
        assignment_id=lease.assignment.pk,
        user=user,
        ratings=[RatingInput(step_id=s.pk, rating=r) for s, r in zip(steps, labels, strict=True)],
    )
    return Chain.objects.get(pk=lease.assignment.chain_id)


def test_the_submit_keeps_the_chain_s_agreement(project, make_member) -> None:
    # Given a chain of three steps and three annotators, overlap 3
    project.overlap = 3
    project.save()
    ChainFactory(project=project, step_count=3)
    first, second, third = (make_member(project) for _ in range(3))

    assert _submit(project, first, [1, 1, 1]).agreement is None  # one pass: none yet
    assert _submit(project, second, [1, -1, 1]).agreement == pytest.approx(2 / 3)
    assert _submit(project, third, [0, -1, 1]).agreement == pytest.approx(1 / 3)


def test_gold_marking_and_unmarking_keeps_the_agreement(project, make_member) -> None:
    chain = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=chain, labels=[1, -1])
    gold_mark(project=project, chain_ids=[chain.pk])
    for labels in ([1, 1], [1, -1]):
        annotation_with_ratings(chain=chain, labels=labels, annotator=make_member(project))

    gold_unmark(project=project, chain_ids=[chain.pk])

    chain.refresh_from_db()
    assert (chain.finished_count, chain.agreement) == (2, pytest.approx(0.5))
