"""The project and membership services, called directly."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from annotation.models import Assignment, AssignmentStatus, Chain, Membership, Project, Role
from annotation.projects.api.serializers import ProjectUpdateInputSerializer
from annotation.projects.services import (
    PROJECT_UPDATABLE_FIELDS,
    membership_add,
    membership_remove,
    membership_role_set,
    project_create,
    project_update,
)
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_create_makes_the_creator_lead() -> None:
    user = UserFactory(is_staff=True)
    project = project_create(name="  Algebra  ", created_by=user, overlap=2)
    assert project.name == "Algebra"
    assert project.created_by == user
    assert Membership.objects.get(project=project).role == Role.LEAD


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "dup"}, "name"),
        ({"name": "fine", "overlap": 0}, "overlap"),
        ({"name": "fine", "labeling_mode": "bogus"}, "labeling_mode"),
        ({"name": ""}, "name"),
    ],
)
def test_create_validates(kwargs: dict, field: str) -> None:
    ProjectFactory(name="dup")
    with pytest.raises(ValidationError) as caught:
        project_create(created_by=UserFactory(), **kwargs)
    assert field in caught.value.message_dict
    assert Project.objects.count() == 1
    assert Membership.objects.count() == 0


def test_update_fields_match_the_api() -> None:
    assert set(ProjectUpdateInputSerializer().fields) == set(PROJECT_UPDATABLE_FIELDS)


@pytest.mark.parametrize(
    ("new_overlap", "expected"),
    [(1, [False, True, True, True]), (2, [False, False, True, True]), (4, [False] * 4)],
)
def test_overlap_change_recomputes_finished_in_one_update(
    new_overlap: int, expected: list[bool]
) -> None:
    # Given chains finished 0..3 times under overlap 3 (flags deliberately stale)
    project = ProjectFactory(overlap=3)
    chains = [ChainFactory(project=project, finished_count=n, is_finished=False) for n in range(4)]
    untouched = ChainFactory(finished_count=5, is_finished=False)  # another project
    # When the overlap changes
    with CaptureQueriesContext(connection) as queries:
        project_update(project=project, data={"overlap": new_overlap})
    # Then every chain's flag follows finished_count >= overlap, set by one UPDATE
    chain_updates = [
        q["sql"] for q in queries.captured_queries
        if q["sql"].startswith('UPDATE "annotation_chain"')
    ]  # fmt: skip
    assert len(chain_updates) == 1
    assert [Chain.objects.get(pk=c.pk).is_finished for c in chains] == expected
    assert Chain.objects.get(pk=untouched.pk).is_finished is False


def test_update_without_overlap_change_leaves_chains_alone() -> None:
    project = ProjectFactory(overlap=1)
    chain = ChainFactory(project=project, finished_count=3, is_finished=False)
    project_update(project=project, data={"guidelines": "g", "overlap": 1})
    chain.refresh_from_db()
    assert chain.is_finished is False  # stale on purpose: untouched without a change


def test_update_refuses_unknown_fields() -> None:
    project = ProjectFactory(name="keep")
    with pytest.raises(ValidationError) as caught:
        project_update(project=project, data={"name": "renamed", "created_by": None})
    assert "created_by" in caught.value.message_dict
    assert Project.objects.get(pk=project.pk).name == "keep"


def test_invalid_update_writes_nothing() -> None:
    project = ProjectFactory(overlap=2)
    chain = ChainFactory(project=project, finished_count=1, is_finished=False)
    with pytest.raises(ValidationError):
        project_update(project=project, data={"overlap": 1, "lease_minutes": 0})
    assert Project.objects.get(pk=project.pk).overlap == 2
    assert Chain.objects.get(pk=chain.pk).is_finished is False


def test_membership_add_is_idempotent() -> None:
    project = ProjectFactory()
    user = UserFactory()
    first, created = membership_add(project=project, user=user, role=Role.ML)
    again, created_again = membership_add(project=project, user=user, role=Role.ML)
    assert (created, created_again) == (True, False)
    assert first.pk == again.pk
    assert Membership.objects.filter(project=project).count() == 1


def test_membership_add_rejects_unknown_role() -> None:
    with pytest.raises(ValidationError):
        membership_add(project=ProjectFactory(), user=UserFactory(), role="owner")


def test_last_lead_cannot_be_demoted_but_one_of_two_can() -> None:
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    with pytest.raises(ValidationError):
        membership_add(project=project, user=lead, role=Role.ANNOTATOR)
    MembershipFactory(project=project, role=Role.LEAD)
    membership, _ = membership_add(project=project, user=lead, role=Role.ANNOTATOR)
    assert membership.role == Role.ANNOTATOR


def test_role_set_changes_a_member_and_keeps_the_last_lead() -> None:
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    annotator = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    assert membership_role_set(project=project, user=annotator, role=Role.LEAD).role == Role.LEAD
    # Two leads now: either may step down, but not both
    assert membership_role_set(project=project, user=lead, role=Role.ML).role == Role.ML
    with pytest.raises(ValidationError) as caught:
        membership_role_set(project=project, user=annotator, role=Role.ANNOTATOR)
    assert "only lead" in caught.value.message_dict["role"][0]
    assert Membership.objects.get(project=project, user=annotator).role == Role.LEAD


def test_role_set_never_adds_anyone() -> None:
    project = ProjectFactory()
    with pytest.raises(Membership.DoesNotExist):
        membership_role_set(project=project, user=UserFactory(), role=Role.ANNOTATOR)
    assert not Membership.objects.filter(project=project).exists()


def test_role_set_rejects_unknown_role() -> None:
    project = ProjectFactory()
    user = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    with pytest.raises(ValidationError):
        membership_role_set(project=project, user=user, role="owner")


def test_remove_expires_live_leases_and_keeps_the_rest() -> None:
    # Given an annotator holding a live lease and a submitted one
    project = ProjectFactory()
    annotator = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    MembershipFactory(project=project, role=Role.LEAD)
    soon = timezone.now() + timedelta(minutes=30)
    live = Assignment.objects.create(
        project=project,
        chain=ChainFactory(project=project),
        annotator=annotator,
        expires_at=soon,
    )
    done = Assignment.objects.create(
        project=project,
        chain=ChainFactory(project=project),
        annotator=annotator,
        expires_at=soon,
        status=AssignmentStatus.SUBMITTED,
    )
    # When the annotator is removed
    membership_remove(project=project, user=annotator)
    # Then the membership is gone, the live lease freed, the finished one untouched
    assert not Membership.objects.filter(project=project, user=annotator).exists()
    live.refresh_from_db()
    done.refresh_from_db()
    assert live.status == AssignmentStatus.EXPIRED and live.finished_at is not None
    assert done.status == AssignmentStatus.SUBMITTED


def test_remove_non_member_raises() -> None:
    with pytest.raises(Membership.DoesNotExist):
        membership_remove(project=ProjectFactory(), user=UserFactory())
