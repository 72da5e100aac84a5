"""The workspace's own endpoints (flag, my-stats, submit-and-next), per-step times in a
submit, and the label page: access, configuration as data, nothing it must not carry."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.labeling.workspace import FLAG_REASON_PREFIX
from annotation.models import (
    Annotation,
    AnnotationSource,
    Assignment,
    AssignmentStatus,
    Chain,
    ImportBatch,
    Project,
    Role,
    StepRating,
)
from annotation.public_ids import ASSIGNMENT_IDS, CHAIN_IDS, STEP_IDS
from tests.annotation.labeling.claiming import assignment_claim_next
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory, UserFactory

pytestmark = pytest.mark.django_db


def lease_url(lease: Assignment | int, action: str) -> str:
    """The URL of ``action`` on a lease: an Assignment, or the public id an answer gave."""
    public = ASSIGNMENT_IDS.show(lease.pk, viewer=None) if isinstance(lease, Assignment) else lease
    return f"/api/v1/assignments/{public}/{action}/"


def ratings_body(chain: Chain, value: int = 1, *, viewer: int, **extra: Any) -> dict[str, Any]:
    """A submit body rating every step of ``chain``, named by their public ids as the
    annotator ``viewer`` (their user id, the lease holder) read them."""
    steps = chain.steps.order_by("index")
    return {
        "ratings": [{"step": STEP_IDS.of(s, viewer=viewer), "rating": value} for s in steps],
        **extra,
    }


@pytest.fixture
def annotator(project: Project, make_member: Any) -> Any:
    return make_member(project)


@pytest.fixture
def client(annotator: Any, client_for: Any) -> APIClient:
    return client_for(annotator)


# --- flag --------------------------------------------------------------------------------


def test_flag_takes_the_chain_out_of_the_queue_and_closes_the_lease(
    project: Project, annotator: Any, client: APIClient, make_member: Any
) -> None:
    # Given: an annotator holding a lease on the only chain
    chain = ChainFactory(project=project)
    lease = assignment_claim_next(project=project, user=annotator)

    # When: they flag it
    response = client.post(lease_url(lease, "flag"), {"reason": " garbled "}, format="json")

    # Then: the chain is flagged, the lease closed with the reason, and nobody gets it
    assert response.status_code == 200, response.content
    assert response.json()["status"] == AssignmentStatus.SKIPPED
    chain.refresh_from_db()
    lease.refresh_from_db()
    assert chain.is_flagged
    assert lease.skip_reason == f"{FLAG_REASON_PREFIX}garbled"
    assert assignment_claim_next(project=project, user=make_member(project)) is None


def test_flag_needs_a_reason(project: Project, annotator: Any, client: APIClient) -> None:
    ChainFactory(project=project)
    lease = assignment_claim_next(project=project, user=annotator)

    response = client.post(lease_url(lease, "flag"), {"reason": "   "}, format="json")

    assert response.status_code == 400
    assert not Chain.objects.filter(is_flagged=True).exists()


def test_flag_of_a_submitted_lease_is_refused_and_flags_nothing(
    project: Project, annotator: Any, client: APIClient
) -> None:
    # Given: a submitted lease
    chain = ChainFactory(project=project, step_count=1)
    lease = assignment_claim_next(project=project, user=annotator)
    client.post(lease_url(lease, "submit"), ratings_body(chain, viewer=annotator.pk), format="json")

    # When: it is flagged afterwards
    response = client.post(lease_url(lease, "flag"), {"reason": "broken"}, format="json")

    # Then: 409, and the chain is not flagged (the flag rolled back with the skip)
    assert response.status_code == 409
    assert response.json()["code"] == "lease_closed"
    chain.refresh_from_db()
    assert not chain.is_flagged


def test_flag_of_someone_elses_lease_is_404(
    project: Project, annotator: Any, make_member: Any, client_for: Any
) -> None:
    chain = ChainFactory(project=project)
    lease = assignment_claim_next(project=project, user=annotator)

    response = client_for(make_member(project)).post(
        lease_url(lease, "flag"), {"reason": "broken"}, format="json"
    )

    assert response.status_code == 404
    chain.refresh_from_db()
    assert not chain.is_flagged


def test_flag_through_a_skipped_lease_is_refused_and_flags_nothing(
    project: Project, annotator: Any, client: APIClient
) -> None:
    # Given: a lease the annotator skipped
    chain = ChainFactory(project=project)
    lease = assignment_claim_next(project=project, user=annotator)
    client.post(lease_url(lease, "skip"), {"reason": "too long"}, format="json")

    # When: they flag the chain through that old lease
    response = client.post(lease_url(lease, "flag"), {"reason": "broken"}, format="json")

    # Then: 409 with a reason, the chain stays in the queue, the skip reason is kept
    assert response.status_code == 409
    assert response.json()["code"] == "lease_closed" and response.json()["detail"]
    chain.refresh_from_db()
    lease.refresh_from_db()
    assert not chain.is_flagged and chain.flagged_by is None
    assert lease.skip_reason == "too long"


@pytest.mark.parametrize("marked_expired", [False, True])
def test_flag_through_an_expired_lease_is_refused_and_flags_nothing(
    project: Project, annotator: Any, client: APIClient, marked_expired: bool
) -> None:
    # Given: a lease that ran out (still ACTIVE past its expiry, or marked EXPIRED by a
    # claim that took its place)
    chain = ChainFactory(project=project)
    past = timezone.now() - project.lease_duration - timedelta(minutes=1)
    lease = assignment_claim_next(project=project, user=annotator, now=past)
    if marked_expired:
        Assignment.objects.filter(pk=lease.pk).update(status=AssignmentStatus.EXPIRED)

    # When: the annotator flags through it
    response = client.post(lease_url(lease, "flag"), {"reason": "broken"}, format="json")

    # Then: 409 lease_lost, nothing flagged, the lease unchanged
    assert response.status_code == 409
    assert response.json()["code"] == "lease_lost"
    chain.refresh_from_db()
    assert not chain.is_flagged
    lease.refresh_from_db()
    assert lease.status == (AssignmentStatus.EXPIRED if marked_expired else AssignmentStatus.ACTIVE)


def test_a_flag_keeps_its_author_reason_and_time_for_the_leads(
    project: Project, annotator: Any, client: APIClient, make_member: Any, client_for: Any
) -> None:
    # Given: an annotator flags their leased chain
    chain = ChainFactory(project=project)
    lease = assignment_claim_next(project=project, user=annotator)
    before = timezone.now()
    client.post(lease_url(lease, "flag"), {"reason": " steps merged "}, format="json")

    # When: a lead lists the flagged chains and opens the chain's labels
    lead = client_for(make_member(project, role=Role.LEAD))
    flags = lead.get(f"/api/v1/projects/{project.pk}/flags/")
    labels = lead.get(f"/api/v1/chains/{chain.pk}/labels/")

    # Then: both show who flagged it, why and when
    assert flags.status_code == 200, flags.content
    (row,) = flags.json()["results"]
    assert row["chain"] == chain.pk
    assert (row["is_flagged"], row["flagged_by"], row["flag_reason"]) == (
        True,
        annotator.username,
        "steps merged",
    )
    assert before <= datetime.fromisoformat(row["flagged_at"]) <= timezone.now()
    assert (row["cleared_by"], row["cleared_at"]) == (None, None)
    assert labels.status_code == 200
    assert labels.json()["flag"] == row
    chain.refresh_from_db()
    assert (chain.flagged_by, chain.flag_reason) == (annotator, "steps merged")

    # And: annotators see neither (only their own skip answer carries their reason)
    other = client_for(make_member(project))
    assert other.get(f"/api/v1/projects/{project.pk}/flags/").status_code == 403
    assert other.get(f"/api/v1/chains/{chain.pk}/labels/").status_code == 403
    assert client.get(f"/api/v1/projects/{project.pk}/flags/").status_code == 403


def test_a_cleared_flag_records_the_lead_and_an_old_lease_cannot_flag_again(
    project: Project, annotator: Any, client: APIClient, make_member: Any, client_for: Any
) -> None:
    # Given: a chain flagged through a lease, then cleared by a lead
    chain = ChainFactory(project=project)
    lease = assignment_claim_next(project=project, user=annotator)
    client.post(lease_url(lease, "flag"), {"reason": "garbled"}, format="json")
    lead_user = make_member(project, role=Role.LEAD)
    lead = client_for(lead_user)
    cleared = lead.post(f"/api/v1/chains/{chain.pk}/unflag/")

    # Then: the clearing is recorded, the author and reason stay, the chain is back
    assert cleared.status_code == 200, cleared.content
    body = cleared.json()
    assert (body["is_flagged"], body["cleared_by"]) == (False, lead_user.username)
    assert body["cleared_at"] is not None
    assert (body["flagged_by"], body["flag_reason"]) == (annotator.username, "garbled")
    assert lead.get(f"/api/v1/projects/{project.pk}/flags/").json()["results"] == []

    # When: the annotator flags again through the old, closed lease
    again = client.post(lease_url(lease, "flag"), {"reason": "garbled"}, format="json")

    # Then: refused, and the lead's decision stands
    assert again.status_code == 409
    assert again.json()["code"] == "lease_closed"
    chain.refresh_from_db()
    assert not chain.is_flagged
    assert (chain.flag_cleared_by, chain.flagged_by) == (lead_user, annotator)
    assert assignment_claim_next(project=project, user=make_member(project)).chain_id == chain.pk


def test_only_leads_clear_a_flag(
    project: Project, annotator: Any, client: APIClient, make_member: Any, client_for: Any
) -> None:
    # Given: a flagged chain
    chain = ChainFactory(project=project)
    lease = assignment_claim_next(project=project, user=annotator)
    client.post(lease_url(lease, "flag"), {"reason": "garbled"}, format="json")

    # When: annotators (the author included) and ML staff try to clear it
    tries = [
        client.post(f"/api/v1/chains/{chain.pk}/unflag/"),
        client_for(make_member(project, role=Role.ML)).post(f"/api/v1/chains/{chain.pk}/unflag/"),
    ]

    # Then: 403, and the chain stays flagged
    assert [r.status_code for r in tries] == [403, 403]
    chain.refresh_from_db()
    assert chain.is_flagged and chain.flag_cleared_by is None


def test_a_flag_reason_is_bounded(project: Project, annotator: Any, client: APIClient) -> None:
    ChainFactory(project=project)
    lease = assignment_claim_next(project=project, user=annotator)

    response = client.post(lease_url(lease, "flag"), {"reason": "x" * 2_001}, format="json")

    assert response.status_code == 400
    assert "reason" in response.json()
    assert not Chain.objects.filter(is_flagged=True).exists()


# --- my-stats ----------------------------------------------------------------------------


def test_my_stats_counts_only_my_work_today_and_in_total(
    project: Project, annotator: Any, client: APIClient, make_member: Any
) -> None:
    # Given: two chains I finished (one yesterday), one I skipped, one someone else did,
    # and one chain in another project of mine
    mine = ChainFactory.create_batch(2, project=project, step_count=1)
    for chain in mine:
        lease = assignment_claim_next(project=project, user=annotator)
        assert lease.chain_id == chain.pk
        assignment_submit(
            assignment_id=lease.pk,
            user=annotator,
            ratings=[RatingInput(step_id=chain.steps.get().pk, rating=1)],
        )
    Annotation.objects.filter(chain=mine[0]).update(
        created_at=timezone.now() - timedelta(days=1, hours=1)
    )
    skipped = ChainFactory(project=project)
    lease = assignment_claim_next(project=project, user=annotator)
    assert lease.chain_id == skipped.pk
    client.post(lease_url(lease, "skip"), {"reason": "too long"}, format="json")
    other = make_member(project)
    their_lease = assignment_claim_next(project=project, user=other)  # the chain I skipped
    assignment_submit(
        assignment_id=their_lease.pk,
        user=other,
        ratings=[RatingInput(step_id=s.pk, rating=1) for s in their_lease.chain.steps.all()],
    )
    elsewhere = ProjectFactory()
    MembershipFactory(project=elsewhere, user=annotator)
    chain = ChainFactory(project=elsewhere, step_count=1)
    lease = assignment_claim_next(project=elsewhere, user=annotator)
    assignment_submit(
        assignment_id=lease.pk,
        user=annotator,
        ratings=[RatingInput(step_id=chain.steps.get().pk, rating=1)],
    )

    # When
    response = client.get(f"/api/v1/projects/{project.pk}/my-stats/")

    # Then
    assert response.status_code == 200
    body = response.json()
    assert (body["annotated_today"], body["annotated_total"], body["skipped_total"]) == (1, 2, 1)
    assert body["gold_accuracy"] is None and body["gold_chains"] == 0
    assert body["steps_today"] == 1  # the one step of today's chain, mine, in this project


def test_my_stats_of_a_project_i_am_not_in_is_404(client: APIClient) -> None:
    other = ProjectFactory()
    assert client.get(f"/api/v1/projects/{other.pk}/my-stats/").status_code == 404


# --- submit-and-next, per-step times -----------------------------------------------------


def test_submit_and_next_records_times_and_returns_the_next_chain(
    project: Project, annotator: Any, client: APIClient
) -> None:
    # Given: two chains; the first is leased
    first, second = ChainFactory.create_batch(2, project=project, step_count=2)
    lease = assignment_claim_next(project=project, user=annotator)
    steps = list(first.steps.order_by("index"))
    body = {
        "ratings": [
            {"step": STEP_IDS.of(steps[0], viewer=annotator.pk), "rating": 1, "duration_ms": 1200},
            {
                "step": STEP_IDS.of(steps[1], viewer=annotator.pk),
                "rating": -1,
                "duration_ms": 3400,
                "comment": "wrong sign",
            },
        ],
        "rewrite": "The right step.",
        "duration_ms": 5000,
        "request_id": "ws-test-1",
    }

    # When
    response = client.post(lease_url(lease, "submit-and-next"), body, format="json")

    # Then: the annotation landed with per-step times, and the next chain came back leased
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["next_status"] == "leased"
    assert data["next"]["chain"]["id"] == CHAIN_IDS.show(second.pk, viewer=annotator.pk)
    following = Assignment.objects.get(
        pk=ASSIGNMENT_IDS.read(data["next"]["assignment"]["id"], viewer=None)
    )
    assert following.chain_id == second.pk
    annotation = Annotation.objects.get(pk=data["annotation"]["id"])
    assert annotation.duration_ms == 5000 and annotation.rewrite == "The right step."
    assert list(
        StepRating.objects.filter(annotation=annotation)
        .order_by("step__index")
        .values_list("rating", "duration_ms", "comment")
    ) == [(1, 1200, ""), (-1, 3400, "wrong sign")]

    # When: the same request is repeated (a dropped answer)
    again = client.post(lease_url(lease, "submit-and-next"), body, format="json")

    # Then: nothing new is written, the status is the first answer's and the same next
    # lease is returned
    assert again.status_code == 201
    assert again.json()["annotation"] == data["annotation"]
    assert again.json()["next"]["assignment"]["id"] == data["next"]["assignment"]["id"]
    assert Annotation.objects.count() == 1


def test_submit_and_next_on_the_last_chain_says_empty(
    project: Project, annotator: Any, client: APIClient
) -> None:
    chain = ChainFactory(project=project, step_count=1)
    lease = assignment_claim_next(project=project, user=annotator)

    response = client.post(
        lease_url(lease, "submit-and-next"), ratings_body(chain, viewer=annotator.pk), format="json"
    )

    assert response.status_code == 201
    assert response.json()["next"] is None
    assert response.json()["next_status"] == "empty"


def test_submit_and_next_with_bad_ratings_claims_nothing(
    project: Project, annotator: Any, client: APIClient
) -> None:
    chain, _other = ChainFactory.create_batch(2, project=project, step_count=2)
    lease = assignment_claim_next(project=project, user=annotator)
    body = ratings_body(chain, viewer=annotator.pk)
    body["ratings"] = body["ratings"][:1]  # all_steps mode needs both

    response = client.post(lease_url(lease, "submit-and-next"), body, format="json")

    assert response.status_code == 400
    assert Assignment.objects.filter(annotator=annotator).count() == 1


def test_step_duration_must_not_be_negative(
    project: Project, annotator: Any, client: APIClient
) -> None:
    chain = ChainFactory(project=project, step_count=1)
    lease = assignment_claim_next(project=project, user=annotator)
    body = ratings_body(chain, viewer=annotator.pk)
    body["ratings"][0]["duration_ms"] = -5

    response = client.post(lease_url(lease, "submit"), body, format="json")

    assert response.status_code == 400
    assert not Annotation.objects.exists()


# --- the label page ----------------------------------------------------------------------


def page_client(user: Any) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.mark.parametrize(
    ("who", "status"),
    [("anonymous", 302), ("annotator", 200), ("lead", 200), ("outsider", 404)],
)
def test_label_page_access(project: Project, make_member: Any, who: str, status: int) -> None:
    users = {
        "anonymous": None,
        "annotator": make_member(project, Role.ANNOTATOR),
        "lead": make_member(project, Role.LEAD),
        "outsider": MembershipFactory(project=ProjectFactory()).user,
    }
    response = page_client(users[who]).get(f"/projects/{project.pk}/label/")
    assert response.status_code == status


def test_label_page_has_no_inline_script_and_no_chain_data(
    project: Project, annotator: Any
) -> None:
    # Given: a chain with imported labels and a guideline with markup
    project.guidelines = "<script>alert(1)</script> Grade carefully."
    project.save()
    chain = ChainFactory(project=project, step_count=2)
    batch = ImportBatch.objects.create(
        project=project, filename="x.jsonl", format="generic", content_hash="h" * 64
    )
    Annotation.objects.create(chain=chain, source=AnnotationSource.IMPORT, import_batch=batch)

    # When
    response = page_client(annotator).get(f"/projects/{project.pk}/label/")
    html = response.content.decode()

    # Then: every script is a file or JSON data; the config carries settings, no chain
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", html, flags=re.S)
    for attrs, body in scripts:
        assert "src=" in attrs or 'type="application/json"' in attrs, attrs
        assert "src=" not in attrs or not body.strip()
    config_match = re.search(r'id="workspace-config"[^>]*>(.*?)</script>', html, flags=re.S)
    assert config_match is not None
    config = json.loads(config_match.group(1))
    assert config["projectId"] == project.pk and config["labelingMode"] == project.labeling_mode
    assert "Step 1." not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>alert(1)</script>" not in html
    assert "/static/vendor/katex/katex.min.js" in html


def test_workspace_assets_are_served_locally(project: Project, annotator: Any) -> None:
    client = page_client(annotator)
    for path in (
        "/static/vendor/katex/katex.min.js",
        "/static/vendor/katex/contrib/auto-render.min.js",
        "/static/vendor/katex/katex.min.css",
        "/static/js/workspace.js",
        "/static/css/workspace.css",
    ):
        response = client.get(path)
        assert response.status_code == 200, path
        # Drain the streamed file so the test client closes it.
        b"".join(response.streaming_content)  # type: ignore[attr-defined]


def test_superuser_outside_the_project_can_open_it(project: Project) -> None:
    admin = UserFactory(is_superuser=True, is_staff=True)
    assert page_client(admin).get(f"/projects/{project.pk}/label/").status_code == 200


def test_submit_and_next_query_count_does_not_grow_with_steps(
    project: Project, annotator: Any, client: APIClient, django_assert_max_num_queries: Any
) -> None:
    # Given: a 3-step chain submitted, then a 30-step chain (the hot path: one per chain)
    small = ChainFactory(project=project, step_count=3)
    ChainFactory(project=project, step_count=30)
    big = ChainFactory(project=project, step_count=30)
    lease = assignment_claim_next(project=project, user=annotator)
    assert lease.chain_id == small.pk
    response = client.post(
        lease_url(lease, "submit-and-next"), ratings_body(small, viewer=annotator.pk), format="json"
    )
    assert response.status_code == 201
    lease_id = response.json()["next"]["assignment"]["id"]
    chain = Assignment.objects.get(pk=ASSIGNMENT_IDS.read(lease_id, viewer=None)).chain

    # When / Then: a 30-step submit that leases the next 30-step chain takes 20 queries
    # for submit, claim and output together, none of them per step
    with django_assert_max_num_queries(20):
        response = client.post(
            lease_url(lease_id, "submit-and-next"),
            ratings_body(chain, viewer=annotator.pk),
            format="json",
        )
    assert response.status_code == 201
    assert response.json()["next"]["chain"]["id"] == CHAIN_IDS.show(big.pk, viewer=annotator.pk)
