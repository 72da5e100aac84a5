"""Routing over the API (issue 23, item 7): the rules on the project (leads write them,
annotators never read them), what routing did with each source's kappa (leads and ML
staff), and the run endpoint that sends a pass. On PostgreSQL; the pass a rule change
sends is sent once the change commits (the worker's side: test_routing_worker.py)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from annotation.models import ChainRouting, Project
from annotation.routing.services import chains_route
from tests.annotation.routing.routing_lab import JUDGE, MC, RULES, routing_chains
from tests.factories import ChainFactory

pytestmark = pytest.mark.django_db

ROUTING_FIELDS = (
    "routing_sources",
    "routing_accept",
    "routing_spot_check",
    "routing_min_kappa",
    "routing_second_look",
)


def test_a_lead_sets_the_rules_and_only_leads_and_ml_staff_read_them(
    project: Project, make_member: Any, client_for: Any, django_capture_on_commit_callbacks: Any
) -> None:
    lead = client_for(make_member(project, "lead"))
    url = f"/api/v1/projects/{project.pk}/"
    body = {
        "routing_sources": [JUDGE, MC],
        "routing_accept": True,
        "routing_spot_check": 0.2,
        "routing_min_kappa": -0.5,
        "routing_second_look": 0.9,
    }

    with django_capture_on_commit_callbacks() as sent:
        response = lead.patch(url, body, format="json")

    assert response.status_code == 200, response.content
    assert {field: response.json()[field] for field in ROUTING_FIELDS} == body
    project.refresh_from_db()
    assert project.routing_sources == [JUDGE, MC] and project.routing_spot_check == 0.2
    assert len(sent) == 1  # the routing pass, sent once the change committed
    # Another setting, or the same rules again, send no pass
    with django_capture_on_commit_callbacks() as sent:
        assert lead.patch(url, {"gold_rate": 0.1, **body}, format="json").status_code == 200
    assert sent == []

    ml = client_for(make_member(project, "ml")).get(url).json()
    assert ml["routing_sources"] == [JUDGE, MC] and ml["routing_accept"] is True
    annotator = client_for(make_member(project, "annotator"))
    for seen in (
        annotator.get(url).json(),
        annotator.get("/api/v1/projects/").json()["results"][0],
    ):
        assert [seen[field] for field in ROUTING_FIELDS] == [None] * 5


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"routing_sources": [MC, MC]}, "routing_sources", "Each source at most once."),
        ({"routing_sources": ["oracle"]}, "routing_sources", "Not a machine source: oracle."),
        ({"routing_sources": "judge"}, "routing_sources", "Expected a list"),
        ({"routing_spot_check": 1.5}, "routing_spot_check", "less than or equal to 1"),
        ({"routing_min_kappa": -1.01}, "routing_min_kappa", "greater than or equal to -1"),
        ({"routing_second_look": -0.1}, "routing_second_look", "greater than or equal to 0"),
        ({"routing_accept": "maybe"}, "routing_accept", "Must be a valid boolean."),
    ],
)
def test_bad_rules_are_refused_with_the_field_s_reason(
    project: Project, make_member: Any, client_for: Any, body: Any, field: str, words: str
) -> None:
    lead = client_for(make_member(project, "lead"))

    response = lead.patch(f"/api/v1/projects/{project.pk}/", body, format="json")

    assert response.status_code == 400, response.content
    assert words in " ".join(response.json()[field])
    project.refresh_from_db()
    assert (project.routing_sources, project.routing_spot_check) == ([], 0.05)


def test_annotators_may_not_change_the_rules(
    project: Project, make_member: Any, client_for: Any
) -> None:
    annotator = client_for(make_member(project, "annotator"))
    response = annotator.patch(
        f"/api/v1/projects/{project.pk}/", {"routing_accept": True}, format="json"
    )
    assert response.status_code == 403
    assert (
        client_for(make_member(project, "annotator"))
        .post(f"/api/v1/projects/{project.pk}/routing/run/")
        .status_code
        == 403
    )


def test_the_summary_gives_each_source_s_kappa_and_the_chains_per_rule(
    project: Project, make_member: Any, client_for: Any
) -> None:
    # Given: trusted sources that agree on one fresh chain and disagree on another, and
    # a rule change made without a pass
    Project.objects.filter(pk=project.pk).update(**RULES)
    project.refresh_from_db()
    routing_chains(project)
    chains_route(project=project)

    response = client_for(make_member(project, "ml")).get(f"/api/v1/projects/{project.pk}/routing/")

    assert response.status_code == 200, response.content
    data = response.json()
    assert [(s["source"], s["kappa"], s["usable"], s["reason"]) for s in data["sources"]] == [
        (MC, 1.0, True, ""),
        (JUDGE, 1.0, True, ""),
    ]
    assert all(s["chains_compared"] == 4 for s in data["sources"])
    assert data["chains"] == {
        ChainRouting.AGREED: 1,
        ChainRouting.SPOT_CHECK: 0,
        ChainRouting.DISAGREED: 1,
        ChainRouting.SECOND_LOOK: 0,
    }
    assert data["spot_checks_waiting"] == 0
    assert data["spot_check_errors"] == {
        "hits": 0,
        "total": 0,
        "rate": None,
        "low": None,
        "high": None,
    }
    assert (data["accept"], data["min_kappa"]) == (True, 0.6)


def test_a_source_under_the_threshold_says_why(
    project: Project, make_member: Any, client_for: Any
) -> None:
    Project.objects.filter(pk=project.pk).update(routing_sources=[JUDGE], routing_min_kappa=0.6)
    ChainFactory(project=project, step_count=2)

    data = (
        client_for(make_member(project, "lead"))
        .get(f"/api/v1/projects/{project.pk}/routing/")
        .json()
    )

    assert data["sources"] == [
        {
            "source": JUDGE,
            "name": "Judge",
            "kappa": None,
            "chains_compared": 0,
            "usable": False,
            "reason": "has labeled no step of this project: start a judge run on the Models page",
        }
    ]


def test_the_run_endpoint_answers_at_once(
    project: Project, make_member: Any, client_for: Any
) -> None:
    lead = client_for(make_member(project, "lead"))

    response = lead.post(f"/api/v1/projects/{project.pk}/routing/run/")

    assert response.status_code == 202, response.content
    assert response.json() == {"detail": "A routing pass is queued."}


def test_the_data_manager_shows_each_chain_s_routing_and_filters_by_it(
    project: Project, make_member: Any, client_for: Any
) -> None:
    Project.objects.filter(pk=project.pk).update(**RULES)
    project.refresh_from_db()
    chains = routing_chains(project)
    chains_route(project=project)
    lead = client_for(make_member(project, "lead"))
    url = f"/api/v1/projects/{project.pk}/chains/"

    agreed = lead.get(url, {"routing": "agreed"}).json()["results"]
    either = lead.get(f"{url}?routing=agreed&routing=disagreed").json()["results"]
    everything = {row["id"]: row["routing"] for row in lead.get(url).json()["results"]}

    assert [(row["id"], row["routing"]) for row in agreed] == [(chains["agreed"].pk, "agreed")]
    assert {row["id"] for row in either} == {chains["agreed"].pk, chains["disputed"].pk}
    assert everything[chains["plain"].pk] == ""
    assert lead.get(url, {"routing": "nowhere"}).status_code == 400
    detail = lead.get(f"/api/v1/chains/{chains['disputed'].pk}/").json()
    assert detail["routing"] == "disagreed"


def _leak_free(value: Any) -> str:
    """The payload's keys and values as one text, to look for routing's words in."""
    return repr(value).lower()


def test_an_annotator_cannot_tell_a_spot_check_from_any_chain(
    project: Project, make_member: Any, client_for: Any
) -> None:
    # Given: a spot check and a plain chain, each the first in the queue of one annotator
    spot, plain = (ChainFactory(project=project, step_count=2) for _ in range(2))
    project.chains.filter(pk=spot.pk).update(routing="spot_check", routing_first_error=1)
    Project.objects.filter(pk=project.pk).update(**{**RULES, "routing_spot_check": 0.5})
    first, second = (client_for(make_member(project, "annotator")) for _ in range(2))

    leases = [
        client.post(f"/api/v1/projects/{project.pk}/assignments/next/", format="json")
        for client in (first, second)
    ]

    # Then: both leases have the same fields, and nothing names routing
    assert [lease.status_code for lease in leases] == [200, 200]
    bodies = [lease.json() for lease in leases]
    assert bodies[0].keys() == bodies[1].keys()
    assert bodies[0]["chain"].keys() == bodies[1]["chain"].keys()
    for body in bodies:
        text = _leak_free(body)
        for word in ("routing", "spot", "people_first", "agreed", "first_error"):
            assert word not in text, (word, body)
    workspace = Client()
    workspace.force_login(project.memberships.filter(role="annotator").first().user)
    page = workspace.get(f"/projects/{project.pk}/label/")
    assert page.status_code == 200
    assert "routing" not in page.content.decode().lower()
