"""Gold endpoints, the project's gold settings and the gold part of my-stats: payloads
and access (leads only; annotators and ML staff 403; non-members 404)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from annotation.labeling.workspace_reads import annotator_stats_get
from annotation.models import (
    Annotation,
    AnnotationSource,
    Chain,
    ImportBatch,
    LabelingMode,
    Screening,
    ScreeningStatus,
)
from tests.factories import (
    ChainFactory,
    ImportBatchFactory,
    ProjectFactory,
    UserFactory,
    annotation_with_ratings,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def labeled(project):
    """A chain with import labels (from one import batch), not yet gold."""
    batch = ImportBatchFactory(project=project)
    chain = ChainFactory(project=project, step_count=3)
    annotation_with_ratings(chain=chain, labels=[1, -1, 1], import_batch=batch)
    return chain


def _calls(project, chain, target_user_id: int) -> dict[str, tuple[str, str, dict | None]]:
    base = f"/api/v1/projects/{project.pk}/gold"
    batch = ImportBatch.objects.filter(project=project).first()
    return {
        "list": ("get", f"{base}/", None),
        "mark": ("post", f"{base}/mark/", {"chain_ids": [chain.pk]}),
        "from_import": ("post", f"{base}/from-import/", {"import_batch": batch.pk}),
        "unmark": ("post", f"{base}/unmark/", {"chain_ids": [chain.pk]}),
        "scores": ("get", f"{base}/scores/", None),
        "reset": ("post", f"{base}/screenings/{target_user_id}/reset/", None),
    }


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("annotator", 403),
        ("ml", 403),
        (None, 404),
    ],
)
def test_only_leads_reach_the_gold_endpoints(
    project, labeled, make_member, client_for, role, expected
):
    caller = make_member(project, role) if role else UserFactory()
    failed = make_member(project)
    Screening.objects.create(project=project, annotator=failed, status=ScreeningStatus.FAILED)
    client = client_for(caller)

    got = {
        name: getattr(client, method)(url, body, format="json").status_code
        for name, (method, url, body) in _calls(project, labeled, failed.pk).items()
    }

    assert got == dict.fromkeys(got, expected)
    assert not Chain.objects.filter(is_gold=True).exists()
    assert Screening.objects.get(annotator=failed).status == ScreeningStatus.FAILED


def test_a_lead_of_another_project_gets_404(project, labeled, make_member, client_for):
    elsewhere = make_member(ProjectFactory(), "lead")
    client = client_for(elsewhere)

    got = {
        name: getattr(client, method)(url, body, format="json").status_code
        for name, (method, url, body) in _calls(project, labeled, elsewhere.pk).items()
    }

    assert set(got.values()) == {404}


def test_anonymous_callers_are_refused(project, labeled, api_client):
    for method, url, body in _calls(project, labeled, 1).values():
        assert getattr(api_client, method)(url, body, format="json").status_code in (401, 403)


def test_a_lead_marks_lists_and_unmarks(project, labeled, make_member, client_for):
    client = client_for(make_member(project, "lead"))
    base = f"/api/v1/projects/{project.pk}/gold"

    marked = client.post(f"{base}/mark/", {"chain_ids": [labeled.pk]}, format="json")
    listed = client.get(f"{base}/")
    unmarked = client.post(f"{base}/unmark/", {"chain_ids": [labeled.pk]}, format="json")

    assert marked.status_code == 200
    assert marked.json() == {"chain_ids": [labeled.pk], "count": 1}
    key = Annotation.objects.get(chain=labeled, source=AnnotationSource.IMPORT)
    assert listed.json() == [
        {
            "id": labeled.pk,
            "gold_annotation": key.pk,
            "answer_key_source": "import",
            "step_count": 3,
            "is_flagged": False,
            "flagged_by": None,
            "flag_reason": "",
        }
    ]
    assert unmarked.json() == {"chain_ids": [labeled.pk], "count": 1}
    assert not Chain.objects.filter(is_gold=True).exists()


def test_marking_a_chain_without_labels_or_of_another_project_is_400(
    project, labeled, make_member, client_for
):
    client = client_for(make_member(project, "lead"))
    url = f"/api/v1/projects/{project.pk}/gold/mark/"
    bare = ChainFactory(project=project)
    foreign = ChainFactory(project=ProjectFactory())
    annotation_with_ratings(chain=foreign, labels=[1, 1, 1])

    no_labels = client.post(url, {"chain_ids": [labeled.pk, bare.pk]}, format="json")
    other = client.post(url, {"chain_ids": [foreign.pk]}, format="json")
    empty = client.post(url, {"chain_ids": []}, format="json")

    assert no_labels.status_code == 400
    assert "known labels" in str(no_labels.json()["chain_ids"])
    assert other.status_code == 400
    assert "Not chains of this project" in str(other.json()["chain_ids"])
    assert empty.status_code == 400
    assert not Chain.objects.filter(is_gold=True).exists()


def test_mark_from_import_and_a_foreign_import_is_404(project, labeled, make_member, client_for):
    client = client_for(make_member(project, "lead"))
    url = f"/api/v1/projects/{project.pk}/gold/from-import/"
    batch = ImportBatch.objects.get(project=project)
    foreign = ImportBatchFactory(project=ProjectFactory())

    ok = client.post(url, {"import_batch": batch.pk}, format="json")
    missing = client.post(url, {"import_batch": foreign.pk}, format="json")

    assert ok.json() == {"chain_ids": [labeled.pk], "count": 1}
    assert missing.status_code == 404


def test_scores_payload(make_member, client_for):
    project = ProjectFactory(labeling_mode=LabelingMode.FIRST_ERROR, screening_chains=1)
    lead = make_member(project, "lead")
    ann = make_member(project, user__username="ann")
    gold = ChainFactory(project=project, step_count=3)
    annotation_with_ratings(chain=gold, labels=[1, -1, None])
    client = client_for(lead)
    client.post(
        f"/api/v1/projects/{project.pk}/gold/mark/", {"chain_ids": [gold.pk]}, format="json"
    )
    annotation_with_ratings(chain=gold, annotator=ann, labels=[1, 1, -1])
    failed = make_member(project, user__username="zed")
    Screening.objects.create(
        project=project, annotator=failed, status=ScreeningStatus.FAILED, chains=1
    )

    body = client.get(f"/api/v1/projects/{project.pk}/gold/scores/").json()

    assert (body["gold_chains"], body["screening_chains"]) == (1, 1)
    first, second = body["annotators"]
    assert first == {
        "annotator_id": ann.pk,
        "username": "ann",
        "role": "annotator",
        "chains": 1,
        "steps_compared": 2,
        "steps_correct": 1,
        "step_accuracy": 0.5,
        "first_error_match": 0.0,
        "screening": None,
    }
    assert (second["username"], second["chains"], second["step_accuracy"]) == ("zed", 0, None)
    assert second["screening"]["status"] == "failed"


def test_a_lead_resets_a_failed_screening(project, make_member, client_for):
    lead_client = client_for(make_member(project, "lead"))
    failed = make_member(project)
    Screening.objects.create(project=project, annotator=failed, status=ScreeningStatus.FAILED)
    url = f"/api/v1/projects/{project.pk}/gold/screenings/{failed.pk}/reset/"

    first = lead_client.post(url)
    again = lead_client.post(url)
    stranger = lead_client.post(
        f"/api/v1/projects/{project.pk}/gold/screenings/{UserFactory().pk}/reset/"
    )

    assert first.status_code == 200
    assert (first.json()["status"], first.json()["resets"]) == ("pending", 1)
    assert again.status_code == 400
    assert stranger.status_code == 404


# --- project settings ----------------------------------------------------------------------


def test_members_read_the_gold_settings_and_import_labels(project, make_member, client_for):
    body = client_for(make_member(project)).get(f"/api/v1/projects/{project.pk}/").json()

    assert {
        key: body[key]
        for key in ("import_labels", "gold_rate", "screening_chains", "screening_pass_accuracy")
    } == {
        "import_labels": "fallback",
        "gold_rate": 0.0,
        "screening_chains": 0,
        "screening_pass_accuracy": 0.8,
    }


def test_only_leads_change_the_gold_settings(project, make_member, client_for):
    url = f"/api/v1/projects/{project.pk}/"
    change = {
        "gold_rate": 0.25,
        "screening_chains": 5,
        "screening_pass_accuracy": 0.9,
        "import_labels": "vote",
    }

    refused = client_for(make_member(project)).patch(url, change, format="json")
    ml = client_for(make_member(project, "ml")).patch(url, change, format="json")
    lead = client_for(make_member(project, "lead"))
    ok = lead.patch(url, change, format="json")
    bad = lead.patch(url, {"gold_rate": 1.5, "import_labels": "sometimes"}, format="json")

    assert (refused.status_code, ml.status_code, ok.status_code) == (403, 403, 200)
    assert {key: ok.json()[key] for key in change} == change
    assert bad.status_code == 400 and set(bad.json()) == {"gold_rate", "import_labels"}
    project.refresh_from_db()
    assert (project.gold_rate, project.screening_chains, project.import_labels) == (
        0.25,
        5,
        "vote",
    )


def test_staff_create_a_project_with_gold_settings(client_for):
    staff = UserFactory(is_staff=True)

    response = client_for(staff).post(
        "/api/v1/projects/",
        {"name": "with gold", "overlap": 2, "labeling_mode": "all_steps", "gold_rate": 0.1},
        format="json",
    )

    assert response.status_code == 201
    assert response.json()["gold_rate"] == 0.1


# --- my-stats ------------------------------------------------------------------------------


def test_my_stats_gold_is_null_without_gold_and_counts_only_before_today(
    project, make_member, client_for
):
    user = make_member(project)
    url = f"/api/v1/projects/{project.pk}/my-stats/"
    assert client_for(user).get(url).json()["gold"] is None

    lead_client = client_for(make_member(project, "lead"))
    chains = [ChainFactory(project=project, step_count=2) for _ in range(2)]
    for chain in chains:
        annotation_with_ratings(chain=chain, labels=[1, -1])
    lead_client.post(
        f"/api/v1/projects/{project.pk}/gold/mark/",
        {"chain_ids": [c.pk for c in chains]},
        format="json",
    )
    annotation_with_ratings(chain=chains[0], annotator=user, labels=[1, -1])
    today = annotator_stats_get(project=project, user=user)
    assert today.gold is None and today.gold_chains == 0

    tomorrow = annotator_stats_get(project=project, user=user, now=timezone.now() + timedelta(1))
    assert tomorrow.gold is not None
    assert (tomorrow.gold.chains, tomorrow.gold.step_accuracy) == (1, 1.0)
    assert tomorrow.gold.first_error_match == 1.0
    assert (tomorrow.gold_chains, tomorrow.gold_accuracy) == (1, 1.0)


def test_my_stats_says_where_screening_stands(project, make_member, client_for):
    project.screening_chains = 3
    project.save()
    user = make_member(project)
    url = f"/api/v1/projects/{project.pk}/my-stats/"

    waiting = client_for(user).get(url).json()["screening"]
    Screening.objects.create(
        project=project, annotator=user, status=ScreeningStatus.FAILED, step_accuracy=0.5
    )
    failed = client_for(user).get(url).json()["screening"]
    lead_view = client_for(make_member(project, "lead")).get(url).json()["screening"]

    assert (waiting["status"], waiting["done"], waiting["required"]) == ("pending", 0, 3)
    assert "not ready" in waiting["message"]
    assert (failed["status"], failed["step_accuracy"]) == ("failed", 0.5)
    assert "lead" in failed["message"]
    assert lead_view is None  # leads are not screened


# --- admin ---------------------------------------------------------------------------------


def test_admin_actions_mark_and_unmark_gold(project, labeled):
    bare = ChainFactory(project=project)
    admin = Client()
    admin.force_login(UserFactory(is_staff=True, is_superuser=True))
    url = "/admin/annotation/chain/"

    admin.post(url, {"action": "mark_gold", "_selected_action": [labeled.pk, bare.pk]})
    refused = Chain.objects.filter(is_gold=True).count()
    admin.post(url, {"action": "mark_gold", "_selected_action": [labeled.pk]})
    marked = list(Chain.objects.filter(is_gold=True).values_list("pk", flat=True))
    admin.post(url, {"action": "unmark_gold", "_selected_action": [labeled.pk]})

    assert refused == 0  # the chain without labels made the whole action fail
    assert marked == [labeled.pk]
    assert not Chain.objects.filter(is_gold=True).exists()
    # The gold fields are not editable in the change form: only the actions set them.
    form = admin.get(f"{url}{labeled.pk}/change/").content.decode()
    assert 'name="is_gold"' not in form and 'name="gold_annotation"' not in form
