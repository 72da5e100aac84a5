"""The admin shows the data but is not a second write path for labels and leases."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from annotation.models import (
    Annotation,
    AnnotationSource,
    Assignment,
    Chain,
    Invite,
    Project,
    Role,
    StepRating,
)
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_() -> Client:
    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


@pytest.fixture
def labeled_chain() -> Chain:
    project = ProjectFactory(overlap=2)
    annotator = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    chain = ChainFactory(project=project, finished_count=1)
    annotation = Annotation.objects.create(
        chain=chain, source=AnnotationSource.HUMAN, annotator=annotator
    )
    StepRating.objects.bulk_create(
        [StepRating(annotation=annotation, step=step, rating=1) for step in chain.steps.all()]
    )
    Assignment.objects.create(
        project=project,
        chain=chain,
        annotator=annotator,
        expires_at=timezone.now() + timedelta(minutes=5),
    )
    return chain


@pytest.mark.parametrize(
    "model",
    [
        "project",
        "membership",
        "invite",
        "apitoken",
        "importbatch",
        "problem",
        "chain",
        "annotation",
        "assignment",
    ],
)
def test_changelists_render(admin_client_: Client, labeled_chain: Chain, model: str) -> None:
    assert admin_client_.get(f"/admin/annotation/{model}/").status_code == 200


def test_annotations_cannot_be_changed_added_or_deleted(
    admin_client_: Client, labeled_chain: Chain
) -> None:
    annotation = labeled_chain.annotations.get()
    url = f"/admin/annotation/annotation/{annotation.pk}/change/"
    page = admin_client_.get(url)
    assert page.status_code == 200  # view only
    assert b'name="_save"' not in page.content
    assert admin_client_.post(url, {"rewrite": "edited"}).status_code == 403
    assert admin_client_.get("/admin/annotation/annotation/add/").status_code == 403
    delete = admin_client_.post(
        f"/admin/annotation/annotation/{annotation.pk}/delete/", {"post": "yes"}
    )
    assert delete.status_code == 403
    annotation.refresh_from_db()
    assert annotation.rewrite == ""
    assert StepRating.objects.filter(annotation=annotation).count() == 3


def test_chains_cannot_be_deleted_and_a_labeled_project_neither(
    admin_client_: Client, labeled_chain: Chain
) -> None:
    chain_delete = admin_client_.post(
        f"/admin/annotation/chain/{labeled_chain.pk}/delete/", {"post": "yes"}
    )
    project_delete = admin_client_.post(
        f"/admin/annotation/project/{labeled_chain.project_id}/delete/", {"post": "yes"}
    )
    assert (chain_delete.status_code, project_delete.status_code) == (403, 403)
    assert Chain.objects.filter(pk=labeled_chain.pk).exists()
    assert Project.objects.filter(pk=labeled_chain.project_id).exists()


def test_the_chain_flag_changes_only_through_actions_that_record_who() -> None:
    # Given a staff user and a chain in the queue
    staff = UserFactory(is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(staff)
    chain = ChainFactory(project=ProjectFactory())
    changelist = "/admin/annotation/chain/"

    # When they flag it, then clear it, with the changelist's actions
    flagged = client.post(changelist, {"action": "flag_chains", "_selected_action": [chain.pk]})
    chain.refresh_from_db()
    flag = (chain.is_flagged, chain.flagged_by, chain.flag_reason, chain.flagged_at is not None)
    cleared = client.post(changelist, {"action": "clear_flags", "_selected_action": [chain.pk]})

    # Then each is recorded with who did it, and the change form cannot set the flag
    assert (flagged.status_code, cleared.status_code) == (302, 302)
    assert flag == (True, staff, "Flagged in the admin.", True)
    chain.refresh_from_db()
    assert (chain.is_flagged, chain.flag_cleared_by) == (False, staff)
    assert chain.flag_cleared_at is not None and chain.flagged_by == staff
    form = client.get(f"/admin/annotation/chain/{chain.pk}/change/").context["adminform"].form
    assert "is_flagged" not in form.fields


def test_an_invitation_shows_in_the_admin_without_its_link_s_hash(
    admin_client_: Client, labeled_chain: Chain
) -> None:
    invite = Invite.objects.create(
        project=labeled_chain.project,
        role=Role.ANNOTATOR,
        email="ann@lab.example",
        selector="1" * 16,
        token_hash="a" * 64,
        expires_at=timezone.now() + timedelta(days=1),
    )
    listed = admin_client_.get("/admin/annotation/invite/")
    assert b"ann@lab.example" in listed.content
    page = admin_client_.get(f"/admin/annotation/invite/{invite.pk}/change/")
    assert page.status_code == 200
    assert b"a" * 64 not in page.content and b"1" * 16 not in page.content


def test_staff_see_and_revoke_api_tokens_without_their_hashes(admin_client_: Client) -> None:
    from annotation.models import ApiToken
    from tests.factories import UserFactory, api_token_key

    key = api_token_key(UserFactory(), name="leaked laptop")
    token = ApiToken.objects.get()
    page = admin_client_.get(f"/admin/annotation/apitoken/{token.pk}/change/").content.decode()
    assert "leaked laptop" in page and token.key_hash not in page and key not in page
    deleted = admin_client_.post(f"/admin/annotation/apitoken/{token.pk}/delete/", {"post": "yes"})
    assert deleted.status_code == 302
    assert not ApiToken.objects.exists()
