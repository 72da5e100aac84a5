"""The data manager shows which evaluation set a chain is held out in and filters on it:
the list's column and filter, the API's `in_evaluation_set` parameter, a bulk action's
filter, each sort order, and the page's query count unchanged by the set's name."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from annotation.chains.order import ChainOrder
from annotation.chains.selectors import ChainFilters, chain_list
from annotation.datasets.evaluation_sets import evaluation_set_mark_chains
from annotation.models import Role
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def held() -> dict[str, Any]:
    """Six chains: 1 and 4 in the set "unseen", 2 in "olympiad", the rest in none."""
    project = ProjectFactory()
    ids = [ChainFactory(project=project, step_count=2).pk for _ in range(6)]
    evaluation_set_mark_chains(project=project, chain_ids=[ids[1], ids[4]], name="unseen")
    evaluation_set_mark_chains(project=project, chain_ids=[ids[2]], name="olympiad")
    return {"project": project, "ids": ids}


def _shown(project: Any, **filters: Any) -> list[tuple[int, str | None]]:
    page = chain_list(project=project, filters=ChainFilters(**filters))
    return [(row.chain_id, row.evaluation_set) for row in page.rows]


def test_each_row_names_its_set_and_the_filter_keeps_the_held_or_the_free(held) -> None:
    project, ids = held["project"], held["ids"]
    # Given chains in two sets and chains in none; when the list is read, then each row
    # names the set it is held out in
    assert _shown(project) == [
        (ids[0], None),
        (ids[1], "unseen"),
        (ids[2], "olympiad"),
        (ids[3], None),
        (ids[4], "unseen"),
        (ids[5], None),
    ]
    # And the filter keeps the chains of any set, or those of none
    assert [c for c, _ in _shown(project, in_evaluation_set=True)] == [ids[1], ids[2], ids[4]]
    assert [c for c, _ in _shown(project, in_evaluation_set=False)] == [ids[0], ids[3], ids[5]]


@pytest.mark.parametrize("sort", ["status", "-passes", "agreement", "prm_score"])
def test_the_filter_holds_in_every_sort_order(held, sort: str) -> None:
    project, ids = held["project"], held["ids"]
    page = chain_list(
        project=project,
        filters=ChainFilters(in_evaluation_set=True),
        order=ChainOrder.parse(sort),
    )
    assert sorted(row.chain_id for row in page.rows) == [ids[1], ids[2], ids[4]]
    assert {row.evaluation_set for row in page.rows} == {"unseen", "olympiad"}


def test_the_set_s_name_costs_the_page_no_query(held) -> None:
    with CaptureQueriesContext(connection) as queries:
        chain_list(project=held["project"], filters=ChainFilters(in_evaluation_set=True))
    # the page, the newest scoring run, and the page's machine labels
    assert len(queries) == 3


def test_the_api_takes_the_filter_and_gives_the_set_s_name(held) -> None:
    project, ids = held["project"], held["ids"]
    client = APIClient()
    client.force_login(MembershipFactory(project=project, role=Role.LEAD).user)
    url = f"/api/v1/projects/{project.pk}/chains/"

    def listed(**params: Any) -> list[tuple[int, str | None]]:
        response = client.get(url, params)
        assert response.status_code == 200, response.json()
        return [(row["id"], row["evaluation_set"]) for row in response.json()["results"]]

    assert listed(in_evaluation_set="true") == [
        (ids[1], "unseen"),
        (ids[2], "olympiad"),
        (ids[4], "unseen"),
    ]
    assert [c for c, _ in listed(in_evaluation_set="false")] == [ids[0], ids[3], ids[5]]
    assert len(listed()) == len(listed(in_evaluation_set="")) == 6
    assert client.get(url, {"in_evaluation_set": "perhaps"}).status_code == 400

    # A bulk action on a filter counts the same chains
    preview = client.post(
        f"/api/v1/projects/{project.pk}/chains/bulk/preview/",
        {"action": "unflag", "filters": {"in_evaluation_set": True}},
        format="json",
    )
    assert preview.status_code == 200, preview.json()
    assert preview.json()["matched"] == 3
