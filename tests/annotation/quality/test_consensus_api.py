"""The consensus method over the API: the project setting (create, read, change, refuse a
bad value; only leads change it) and the review payload's majority and Dawid-Skene labels."""

from __future__ import annotations

import pytest

from annotation.models import ConsensusMethod, Project, Role
from tests.annotation.quality.test_consensus_dawid_skene import calibrated_project
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_a_project_starts_with_majority_and_a_lead_switches_to_dawid_skene(
    project, make_member, client_for
):
    lead = client_for(make_member(project, Role.LEAD))
    url = f"/api/v1/projects/{project.pk}/"

    assert lead.get(url).json()["consensus"] == "majority"
    response = lead.patch(url, {"consensus": "dawid_skene"}, format="json")

    assert response.status_code == 200, response.json()
    assert response.json()["consensus"] == "dawid_skene"
    assert Project.objects.get(pk=project.pk).consensus == ConsensusMethod.DAWID_SKENE


def test_a_bad_method_is_refused_and_nothing_changes(project, make_member, client_for):
    lead = client_for(make_member(project, Role.LEAD))

    response = lead.patch(f"/api/v1/projects/{project.pk}/", {"consensus": "vibes"}, format="json")

    assert response.status_code == 400
    assert "consensus" in response.json()
    assert Project.objects.get(pk=project.pk).consensus == ConsensusMethod.MAJORITY


@pytest.mark.parametrize("role", [Role.ANNOTATOR, Role.ML])
def test_only_leads_change_the_method(project, make_member, client_for, role):
    client = client_for(make_member(project, role))

    response = client.patch(
        f"/api/v1/projects/{project.pk}/", {"consensus": "dawid_skene"}, format="json"
    )

    assert response.status_code == 403
    assert Project.objects.get(pk=project.pk).consensus == ConsensusMethod.MAJORITY


def test_a_project_is_created_with_dawid_skene(client_for):
    staff = client_for(UserFactory(is_staff=True))

    response = staff.post(
        "/api/v1/projects/",
        {"name": "learned", "overlap": 3, "labeling_mode": "all_steps", "consensus": "dawid_skene"},
        format="json",
    )

    assert response.status_code == 201, response.json()
    assert response.json()["consensus"] == "dawid_skene"


def test_the_setting_is_described_in_the_schema(client_for):
    schema = client_for(UserFactory()).get("/api/schema/", {"format": "json"}).json()
    field = schema["components"]["schemas"]["PatchedProjectUpdateInput"]["properties"]["consensus"]
    assert "Dawid-Skene" in field["description"]


def test_review_payload_shows_majority_and_dawid_skene_per_step(project, make_member, client_for):
    people, _, target = calibrated_project(project)
    lead = client_for(make_member(project, Role.LEAD))
    url = f"/api/v1/chains/{target.pk}/labels/"

    # A majority-vote project is never fitted for the comparison: no Dawid-Skene column
    payload = lead.get(url).json()
    assert payload["consensus_method"] == "majority"
    assert [step["dawid_skene"] for step in payload["steps"]] == [None, None]
    assert payload["reliability"] == {}

    # When the project switches, the consensus follows Dawid-Skene
    lead.patch(f"/api/v1/projects/{project.pk}/", {"consensus": "dawid_skene"}, format="json")
    payload = lead.get(url).json()
    assert payload["consensus_method"] == "dawid_skene"
    assert [step["consensus"] for step in payload["steps"]] == [1, 1]
    assert [step["tied"] for step in payload["steps"]] == [False, False]

    # And switched back, its fit (still current) shows beside majority vote
    lead.patch(f"/api/v1/projects/{project.pk}/", {"consensus": "majority"}, format="json")
    payload = lead.get(url).json()
    assert payload["consensus_method"] == "majority"
    first, second = payload["steps"]
    # Step 1: ann +1 vs uli -1. Majority ties (and says so); Dawid-Skene follows ann
    assert first["majority"] == {"label": -1, "support": 0.5, "tied": True}
    assert first["dawid_skene"]["label"] == 1 and first["dawid_skene"]["tied"] is False
    assert first["dawid_skene"]["probability"] > 0.95
    assert (first["consensus"], first["tied"]) == (-1, True)  # the project's method
    # Step 2: ann +1 vs uli and vic -1. Majority outvotes ann; Dawid-Skene does not
    assert second["majority"]["label"] == -1 and second["majority"]["tied"] is False
    assert second["dawid_skene"]["label"] == 1
    assert payload["reliability"][people["ann"].username] > 0.95
    assert payload["reliability"][people["uli"].username] < 0.5


def test_a_step_nobody_rated_has_no_dawid_skene_label(project, make_member, client_for):
    from tests.factories import ChainFactory, annotation_with_ratings

    chain = ChainFactory(project=project, step_count=3)
    annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[1, -1, None])
    lead = client_for(make_member(project, Role.LEAD))

    steps = lead.get(f"/api/v1/chains/{chain.pk}/labels/").json()["steps"]

    assert steps[2]["dawid_skene"] is None
    assert steps[2]["majority"] == {"label": None, "support": None, "tied": False}
