"""Projects and members over the API: access for every endpoint and role, payloads,
validation, and the query count of the list."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.models import LabelingMode, Membership, Project, Role
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db

User = get_user_model()


@pytest.fixture
def world(project: Project, make_member: Callable[..., Any]) -> dict[str, Any]:
    """A project with one member per role, a member of another project, a staff user who
    is no member, a superuser, and a spare member to remove."""
    other = ProjectFactory(name="someone else's project")
    people = {
        "annotator": make_member(project, Role.ANNOTATOR),
        "lead": make_member(project, Role.LEAD),
        "ml": make_member(project, Role.ML),
        "outsider": make_member(other, Role.LEAD),
        "staff": UserFactory(is_staff=True),
        "superuser": UserFactory(is_staff=True, is_superuser=True),
    }
    spare = make_member(project, Role.ANNOTATOR)
    return {"project": project, "other": other, "people": people, "spare": spare}


def _client(world: dict[str, Any], who: str) -> APIClient:
    client = APIClient()
    if who != "anonymous":
        client.force_authenticate(user=world["people"][who])
    return client


def _call(world: dict[str, Any], who: str, endpoint: str) -> int:
    project: Project = world["project"]
    base = f"/api/v1/projects/{project.pk}/"
    client = _client(world, who)
    requests: dict[str, Callable[[], Any]] = {
        "list": lambda: client.get("/api/v1/projects/"),
        "create": lambda: client.post(
            "/api/v1/projects/",
            {"name": f"new by {who}", "overlap": 1, "labeling_mode": "all_steps"},
            format="json",
        ),
        "retrieve": lambda: client.get(base),
        "update": lambda: client.patch(base, {"guidelines": "Be careful."}, format="json"),
        "members_list": lambda: client.get(base + "members/"),
        "members_add": lambda: client.post(
            base + "members/",
            {"username": UserFactory().username, "role": "annotator"},
            format="json",
        ),
        "members_remove": lambda: client.delete(f"{base}members/{world['spare'].pk}/"),
        "members_role": lambda: client.patch(
            f"{base}members/{world['spare'].pk}/", {"role": "ml"}, format="json"
        ),
        "guidelines_preview": lambda: client.post(
            "/api/v1/guidelines/preview/", {"guidelines": "*Rate* each step."}, format="json"
        ),
    }
    return requests[endpoint]().status_code


ROLES = ("anonymous", "annotator", "lead", "ml", "outsider", "staff", "superuser")
# Expected status per endpoint, in the order of ROLES. A non-member's 404 hides that the
# project exists; a member without the role gets 403.
ACCESS = {
    "list": (401, 200, 200, 200, 200, 200, 200),
    "create": (401, 403, 403, 403, 403, 201, 201),
    "retrieve": (401, 200, 200, 200, 404, 404, 200),
    "update": (401, 403, 200, 403, 404, 404, 200),
    "members_list": (401, 200, 200, 200, 404, 404, 200),
    "members_add": (401, 403, 201, 403, 404, 404, 201),
    "members_remove": (401, 403, 204, 403, 404, 404, 204),
    "members_role": (401, 403, 200, 403, 404, 404, 200),
    # It renders its body and reads nothing else: any signed-in user.
    "guidelines_preview": (401, 200, 200, 200, 200, 200, 200),
}


@pytest.mark.parametrize(
    ("endpoint", "who", "expected"),
    [
        (endpoint, who, code)
        for endpoint, codes in ACCESS.items()
        for who, code in zip(ROLES, codes, strict=True)
    ],
)
def test_access_rules(world: dict[str, Any], endpoint: str, who: str, expected: int) -> None:
    # Given a project with members of every role and outsiders
    # When each of them calls each endpoint
    status_code = _call(world, who, endpoint)
    # Then the answer follows the access table
    assert status_code == expected


def test_anonymous_is_asked_for_a_token(api_client: APIClient) -> None:
    response = api_client.get("/api/v1/projects/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_list_shows_only_own_projects_with_role_and_progress(
    world: dict[str, Any], client_for: Callable[..., APIClient]
) -> None:
    # Given a project with overlap 2 and chains finished 0, 1 and 3 times (3 > overlap,
    # as after lowering it), and an empty second project of the annotator's
    project: Project = world["project"]
    project.overlap = 2
    project.save()
    for finished in (0, 1, 3):
        ChainFactory(project=project, finished_count=finished, is_finished=finished >= 2)
    annotator = world["people"]["annotator"]
    empty = ProjectFactory(name="empty")
    MembershipFactory(project=empty, user=annotator, role=Role.LEAD)

    # When the annotator lists projects
    response = client_for(annotator).get("/api/v1/projects/")

    # Then both of their projects, and only those, come back with progress and role
    assert response.status_code == 200
    results = {row["name"]: row for row in response.json()["results"]}
    assert set(results) == {project.name, "empty"}
    assert results[project.name]["role"] == "annotator"
    assert results[project.name]["progress"] == {
        "chains_total": 3,
        "chains_finished": 1,
        "annotations_needed": 6,
        "annotations_finished": 3,  # 0 + 1 + min(3, 2)
        "percent": 50.0,
        "as_of": timezone.localdate().isoformat(),  # an annotator's: today's first reading
    }
    assert results["empty"]["role"] == "lead"
    assert results["empty"]["progress"]["as_of"] is None  # a lead's: live
    assert results["empty"]["progress"]["annotations_finished"] == 0
    assert results["empty"]["progress"]["annotations_needed"] == 0


def test_superuser_sees_every_project_as_lead(
    world: dict[str, Any], client_for: Callable[..., APIClient]
) -> None:
    response = client_for(world["people"]["superuser"]).get("/api/v1/projects/")
    rows = response.json()["results"]
    assert {row["id"] for row in rows} == {world["project"].pk, world["other"].pk}
    assert {row["role"] for row in rows} == {"lead"}


@pytest.mark.parametrize("project_count", [2, 6])
def test_list_query_count_does_not_grow_with_projects(
    project_count: int,
    client_for: Callable[..., APIClient],
    django_assert_num_queries: Any,
) -> None:
    # Given a user in N projects with chains each
    user = UserFactory()
    for i in range(project_count):
        p = ProjectFactory(name=f"counted {i}")
        MembershipFactory(project=p, user=user, role=Role.ANNOTATOR)
        ChainFactory(project=p)
        ChainFactory(project=p, finished_count=1, is_finished=True)
    client = client_for(user)
    # When listing, then two queries: the page count and the annotated page, and on the
    # day's first reading two more to freeze the annotators' figures (one UPDATE, one read)
    with django_assert_num_queries(4):
        response = client.get("/api/v1/projects/")
    assert len(response.json()["results"]) == project_count
    with django_assert_num_queries(2):
        assert client.get("/api/v1/projects/").json() == response.json()


def test_staff_creates_project_and_becomes_its_lead(client_for: Callable[..., APIClient]) -> None:
    staff = UserFactory(is_staff=True)
    response = client_for(staff).post(
        "/api/v1/projects/",
        {
            "name": "Geometry",
            "overlap": 3,
            "labeling_mode": "first_error",
            "guidelines": "Stop at the first error.",
            "lease_minutes": 45,
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    body = response.json()
    project = Project.objects.get(pk=body["id"])
    assert (project.name, project.overlap, project.labeling_mode) == (
        "Geometry",
        3,
        LabelingMode.FIRST_ERROR,
    )
    assert project.lease_minutes == 45 and project.created_by == staff
    assert body["role"] == "lead" and body["guidelines"] == "Stop at the first error."
    assert Membership.objects.get(project=project, user=staff).role == Role.LEAD


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"name": "taken", "overlap": 1, "labeling_mode": "all_steps"}, "name"),
        ({"name": "x", "overlap": 0, "labeling_mode": "all_steps"}, "overlap"),
        ({"name": "x", "overlap": 1, "labeling_mode": "some_steps"}, "labeling_mode"),
        ({"name": "x", "labeling_mode": "all_steps"}, "overlap"),
        ({"name": "x", "overlap": 1, "labeling_mode": "all_steps", "owner": 3}, "owner"),
    ],
)
def test_create_rejects_bad_input(
    client_for: Callable[..., APIClient], payload: dict[str, Any], field: str
) -> None:
    ProjectFactory(name="taken")
    response = client_for(UserFactory(is_staff=True)).post(
        "/api/v1/projects/", payload, format="json"
    )
    assert response.status_code == 400
    assert field in response.json()
    assert Project.objects.count() == 1


def test_foreign_project_is_404_not_403(
    world: dict[str, Any], client_for: Callable[..., APIClient]
) -> None:
    outsider = client_for(world["people"]["outsider"])
    missing = client_for(world["people"]["outsider"]).get("/api/v1/projects/999999/")
    foreign = outsider.get(f"/api/v1/projects/{world['project'].pk}/")
    # The same answer for a project that exists and one that does not.
    assert foreign.status_code == missing.status_code == 404
    assert foreign.json() == missing.json()


def test_lead_changes_settings_and_overlap_reopens_chains(
    world: dict[str, Any], client_for: Callable[..., APIClient]
) -> None:
    # Given chains finished once under overlap 1
    project: Project = world["project"]
    chains = [ChainFactory(project=project, finished_count=1, is_finished=True) for _ in "ab"]
    # When the lead raises the overlap to 2 and edits the guidelines
    response = client_for(world["people"]["lead"]).patch(
        f"/api/v1/projects/{project.pk}/",
        {"overlap": 2, "guidelines": "New rules", "show_reference_answer": False},
        format="json",
    )
    # Then the settings change and the chains are open again
    assert response.status_code == 200, response.json()
    assert response.json()["overlap"] == 2
    assert response.json()["progress"]["chains_finished"] == 0
    project.refresh_from_db()
    assert (project.overlap, project.guidelines, project.show_reference_answer) == (
        2,
        "New rules",
        False,
    )
    for chain in chains:
        chain.refresh_from_db()
        assert chain.is_finished is False


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"overlap": 0}, "overlap"),
        ({"overlap": 51}, "overlap"),
        ({"labeling_mode": "nope"}, "labeling_mode"),
        ({"lease_minutes": 0}, "lease_minutes"),
        ({"name": ""}, "name"),
        ({"name": "x" * 201}, "name"),
        ({"name": "the other project"}, "name"),  # taken
    ],
)
def test_update_rejects_bad_input(
    world: dict[str, Any],
    client_for: Callable[..., APIClient],
    payload: dict[str, Any],
    field: str,
) -> None:
    project: Project = world["project"]
    ProjectFactory(name="the other project")
    response = client_for(world["people"]["lead"]).patch(
        f"/api/v1/projects/{project.pk}/", payload, format="json"
    )
    assert response.status_code == 400
    assert field in response.json()
    refreshed = Project.objects.get(pk=project.pk)
    assert (refreshed.name, refreshed.overlap) == (project.name, project.overlap)


def test_members_list_shows_roles_leads_first(
    world: dict[str, Any], client_for: Callable[..., APIClient]
) -> None:
    response = client_for(world["people"]["annotator"]).get(
        f"/api/v1/projects/{world['project'].pk}/members/"
    )
    assert response.status_code == 200
    rows = response.json()["results"]
    assert rows[0] == {
        "user_id": world["people"]["lead"].pk,
        "username": world["people"]["lead"].username,
        "role": "lead",
        "created_at": rows[0]["created_at"],
    }
    assert {row["username"] for row in rows} == {
        world["people"][who].username for who in ("annotator", "lead", "ml")
    } | {world["spare"].username}
    assert world["people"]["outsider"].username not in {row["username"] for row in rows}


def test_lead_adds_member_then_changes_role(
    world: dict[str, Any], client_for: Callable[..., APIClient]
) -> None:
    project: Project = world["project"]
    newcomer = UserFactory(username="newcomer")
    lead = client_for(world["people"]["lead"])
    url = f"/api/v1/projects/{project.pk}/members/"

    added = lead.post(url, {"username": "newcomer", "role": "annotator"}, format="json")
    assert added.status_code == 201
    assert added.json()["user_id"] == newcomer.pk and added.json()["role"] == "annotator"

    promoted = lead.post(url, {"username": "newcomer", "role": "ml"}, format="json")
    assert promoted.status_code == 200
    assert Membership.objects.get(project=project, user=newcomer).role == Role.ML
    assert Membership.objects.filter(project=project, user=newcomer).count() == 1


@pytest.mark.parametrize(
    ("payload", "field", "fragment"),
    [
        ({"username": "ghost", "role": "annotator"}, "username", "No active user named 'ghost'"),
        ({"username": "", "role": "annotator"}, "username", ""),
        ({"role": "annotator"}, "username", ""),
        ({"username": "real", "role": "boss"}, "role", ""),
    ],
)
def test_add_member_rejects_bad_input(
    world: dict[str, Any],
    client_for: Callable[..., APIClient],
    payload: dict[str, Any],
    field: str,
    fragment: str,
) -> None:
    UserFactory(username="real")
    before = Membership.objects.count()
    response = client_for(world["people"]["lead"]).post(
        f"/api/v1/projects/{world['project'].pk}/members/", payload, format="json"
    )
    assert response.status_code == 400
    assert fragment in " ".join(response.json()[field])
    assert Membership.objects.count() == before


def test_only_lead_cannot_demote_or_remove_themselves(
    world: dict[str, Any], client_for: Callable[..., APIClient]
) -> None:
    project: Project = world["project"]
    lead_user = world["people"]["lead"]
    lead = client_for(lead_user)

    removed = lead.delete(f"/api/v1/projects/{project.pk}/members/{lead_user.pk}/")
    assert removed.status_code == 400
    assert "only lead" in removed.json()["user"][0]

    demoted = lead.post(
        f"/api/v1/projects/{project.pk}/members/",
        {"username": lead_user.username, "role": "annotator"},
        format="json",
    )
    assert demoted.status_code == 400
    assert Membership.objects.get(project=project, user=lead_user).role == Role.LEAD


def test_a_second_lead_may_remove_the_first(
    world: dict[str, Any], client_for: Callable[..., APIClient]
) -> None:
    project: Project = world["project"]
    first = world["people"]["lead"]
    second = MembershipFactory(project=project, role=Role.LEAD).user
    response = client_for(second).delete(f"/api/v1/projects/{project.pk}/members/{first.pk}/")
    assert response.status_code == 204
    assert not Membership.objects.filter(project=project, user=first).exists()
    # and the removed lead lost access at once
    gone = client_for(first).get(f"/api/v1/projects/{project.pk}/")
    assert gone.status_code == 404


@pytest.mark.parametrize("target", ["outsider", "nobody"])
def test_remove_non_member_is_404(
    world: dict[str, Any], client_for: Callable[..., APIClient], target: str
) -> None:
    user_id = world["people"]["outsider"].pk if target == "outsider" else 987654
    response = client_for(world["people"]["lead"]).delete(
        f"/api/v1/projects/{world['project'].pk}/members/{user_id}/"
    )
    assert response.status_code == 404
    assert Membership.objects.filter(user=world["people"]["outsider"]).count() == 1


def test_lead_changes_a_member_s_role(
    world: dict[str, Any], client_for: Callable[..., APIClient]
) -> None:
    # Given an annotator of the project
    project: Project = world["project"]
    spare = world["spare"]
    # When a lead makes them ML staff
    response = client_for(world["people"]["lead"]).patch(
        f"/api/v1/projects/{project.pk}/members/{spare.pk}/", {"role": "ml"}, format="json"
    )
    # Then the role changed, and the answer is the member as the list shows it
    assert response.status_code == 200
    body = response.json()
    assert body["user_id"] == spare.pk and body["username"] == spare.username
    assert body["role"] == "ml" and "created_at" in body
    assert Membership.objects.get(project=project, user=spare).role == Role.ML


def test_role_change_keeps_the_only_lead(
    world: dict[str, Any], client_for: Callable[..., APIClient]
) -> None:
    project: Project = world["project"]
    lead_user = world["people"]["lead"]
    response = client_for(lead_user).patch(
        f"/api/v1/projects/{project.pk}/members/{lead_user.pk}/",
        {"role": "annotator"},
        format="json",
    )
    assert response.status_code == 400
    assert response.json() == {"role": ["This is the project's only lead; add another lead first."]}
    assert Membership.objects.get(project=project, user=lead_user).role == Role.LEAD


def test_one_of_two_leads_may_step_down(
    world: dict[str, Any], client_for: Callable[..., APIClient]
) -> None:
    project: Project = world["project"]
    lead_user = world["people"]["lead"]
    MembershipFactory(project=project, role=Role.LEAD)
    response = client_for(lead_user).patch(
        f"/api/v1/projects/{project.pk}/members/{lead_user.pk}/", {"role": "ml"}, format="json"
    )
    assert response.status_code == 200
    assert Membership.objects.get(project=project, user=lead_user).role == Role.ML
    # and they are no lead any more: settings are out of reach
    refused = client_for(lead_user).patch(
        f"/api/v1/projects/{project.pk}/", {"overlap": 2}, format="json"
    )
    assert refused.status_code == 403


@pytest.mark.parametrize(
    ("payload", "field"),
    [({"role": "boss"}, "role"), ({}, "role"), ({"role": "ml", "username": "x"}, "username")],
)
def test_role_change_rejects_bad_input(
    world: dict[str, Any],
    client_for: Callable[..., APIClient],
    payload: dict[str, Any],
    field: str,
) -> None:
    spare = world["spare"]
    response = client_for(world["people"]["lead"]).patch(
        f"/api/v1/projects/{world['project'].pk}/members/{spare.pk}/", payload, format="json"
    )
    assert response.status_code == 400
    assert field in response.json()
    assert Membership.objects.get(project=world["project"], user=spare).role == Role.ANNOTATOR


@pytest.mark.parametrize("target", ["outsider", "nobody"])
def test_role_change_of_a_non_member_is_404_and_adds_nobody(
    world: dict[str, Any], client_for: Callable[..., APIClient], target: str
) -> None:
    user_id = world["people"]["outsider"].pk if target == "outsider" else 987654
    before = Membership.objects.count()
    response = client_for(world["people"]["lead"]).patch(
        f"/api/v1/projects/{world['project'].pk}/members/{user_id}/", {"role": "ml"}, format="json"
    )
    assert response.status_code == 404
    assert Membership.objects.count() == before


def test_a_lead_renames_the_project_and_the_old_name_is_free_again(
    world: dict[str, Any], client_for: Callable[..., APIClient]
) -> None:
    # Given: a project with a name
    project: Project = world["project"]
    old = project.name
    lead = client_for(world["people"]["lead"])

    # When: its lead renames it (surrounding spaces dropped)
    response = lead.patch(
        f"/api/v1/projects/{project.pk}/", {"name": "  Geometry, round 2 "}, format="json"
    )

    # Then: the new name is the project's everywhere, and the old one can be taken
    assert response.status_code == 200, response.json()
    assert response.json()["name"] == "Geometry, round 2"
    assert Project.objects.get(pk=project.pk).name == "Geometry, round 2"
    listed = lead.get("/api/v1/projects/").json()
    names = [row["name"] for row in listed.get("results", listed)]
    assert "Geometry, round 2" in names and old not in names
    assert ProjectFactory(name=old).pk != project.pk
