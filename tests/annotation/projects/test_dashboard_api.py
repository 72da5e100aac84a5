"""The lead dashboard's endpoint and page: numbers against hand-computed values, access
rules (leads only; other members 403, non-members 404) and a pinned query count."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client
from django.utils import timezone

from annotation.models import (
    Annotation,
    AnnotationSource,
    Chain,
    EvaluationSet,
    Project,
    Role,
    StepRating,
)
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


def _at(day: Any, hour: int) -> datetime:
    return timezone.make_aware(datetime.combine(day, time(hour=hour)))


@pytest.fixture
def labeled(project: Project, make_member: Any) -> dict[str, Any]:
    """Overlap 2, three chains of three steps. Yesterday ann grades chain 1 all correct
    (1 s); today bob grades chain 1 with step 2 wrong (3 s) and ann grades chain 2
    (+1, 0, -1; 2 s). Chain 3 is flagged and nobody's."""
    project.overlap = 2
    project.save(update_fields=["overlap"])
    ann = make_member(project, Role.ANNOTATOR, user__username="ann")
    bob = make_member(project, Role.ANNOTATOR, user__username="bob")
    first, second = ChainFactory(project=project), ChainFactory(project=project)
    ChainFactory(project=project, is_flagged=True)
    today = timezone.localdate()
    for chain, who, labels, day, ms in (
        (first, ann, [1, 1, 1], today - timedelta(days=1), 1000),
        (first, bob, [1, -1, 1], today, 3000),
        (second, ann, [1, 0, -1], today, 2000),
    ):
        made = annotation_with_ratings(chain=chain, annotator=who, labels=labels)
        Annotation.objects.filter(pk=made.pk).update(created_at=_at(day, 0), duration_ms=ms)
    Chain.objects.filter(pk=first.pk).update(finished_count=2, is_finished=True)
    Chain.objects.filter(pk=second.pk).update(finished_count=1)
    return {"project": project, "ann": ann, "bob": bob, "today": today}


def test_dashboard_numbers_match_hand_computed_values(
    labeled: dict[str, Any], make_member: Any, client_for: Any
) -> None:
    project, today = labeled["project"], labeled["today"]
    lead = make_member(project, Role.LEAD)

    data = client_for(lead).get(f"/api/v1/projects/{project.pk}/dashboard/").json()

    assert data["project"]["id"] == project.pk
    assert data["days"] == [str(today - timedelta(days=1)), str(today)]
    assert data["progress"] == {
        "chains_total": 3,
        "chains_finished": 1,
        "chains_flagged": 1,
        "overlap": 2,
        "annotations_needed": 6,
        "annotations_finished": 3,
        "chains_imported": 0,
    }
    assert data["annotations_per_day"] == [1, 2]
    assert data["annotations_cumulative"] == [1, 3]
    assert [(t["username"], t["total"], t["per_day"]) for t in data["throughput"]] == [
        ("ann", 2, [1, 1]),
        ("bob", 1, [0, 1]),
    ]
    assert data["labels"]["totals"] == {"-1": 2, "0": 1, "1": 6}
    assert data["labels"]["per_day"] == {"-1": [0, 2], "0": [0, 1], "1": [3, 3]}
    # percentile_cont over 1000, 2000, 3000: median 2000, p90 at 1.8 -> 2800
    time_per_chain = data["time_per_chain"]
    assert (time_per_chain["chains"], time_per_chain["median_ms"]) == (3, 2000)
    assert time_per_chain["p90_ms"] == pytest.approx(2800)
    assert time_per_chain["per_day"] == [
        {"chains": 1, "median_ms": 1000.0, "p90_ms": 1000.0},
        {"chains": 2, "median_ms": 2500.0, "p90_ms": pytest.approx(2900.0)},
    ]
    # Only chain 1 has two coders: steps (+1,+1), (+1,-1), (+1,+1). Coincidences
    # o[-1][+1] = o[+1][-1] = 1, o[+1][+1] = 4; marginals (1, 0, 5); ordinal
    # delta^2(-1,+1) = (6 - 3)^2 = 9; alpha = 1 - 5 * 18 / 90 = 0.
    agreement = data["agreement"]
    assert agreement["alpha"] == pytest.approx(0.0)
    assert agreement["steps"] == 3
    assert agreement["coincidences"] == [[0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 4.0]]
    # Chain 1's steps count from today, when bob's rating completed them.
    assert agreement["per_day"][0] is None
    assert agreement["per_day"][1] == pytest.approx(0.0)
    assert agreement["first_error_pairs"] == 1  # ann: none, bob: step 2
    assert agreement["first_error_agreement"] == 0.0
    assert data["gold"] is None  # no gold chains


def test_gold_scores_per_annotator_and_over_time(
    labeled: dict[str, Any], make_member: Any, client_for: Any
) -> None:
    # Given: chain 2 becomes gold with the key (+1, +1, -1), set by a lead's adjudication.
    # ann graded it (+1, 0, -1) today: 2 of 3 steps right, first error at step 3 as the key.
    project, today = labeled["project"], labeled["today"]
    lead = make_member(project, Role.LEAD)
    second = Chain.objects.filter(project=project).order_by("id")[1]
    key = Annotation.objects.create(
        chain=second, source=AnnotationSource.ADJUDICATION, annotator=lead, note="key"
    )
    steps = list(second.steps.order_by("index"))
    StepRating.objects.bulk_create(
        StepRating(annotation=key, step=step, rating=r)
        for step, r in zip(steps, [1, 1, -1], strict=True)
    )
    Chain.objects.filter(pk=second.pk).update(is_gold=True, gold_annotation=key)

    gold = client_for(lead).get(f"/api/v1/projects/{project.pk}/dashboard/").json()["gold"]

    # Then: ann's score, and the accuracy series starts today
    assert gold["annotators"] == [
        {
            "annotator": labeled["ann"].pk,
            "username": "ann",
            "chains": 1,
            "steps_compared": 3,
            "step_accuracy": pytest.approx(2 / 3),
            "first_error_match": 1.0,
        }
    ]
    assert gold["per_day"][0] is None
    assert gold["per_day"][1] == pytest.approx(2 / 3)
    assert today  # the days are those of the other series


def test_agreement_series_rises_as_agreeing_labels_come_in(
    project: Project, make_member: Any, client_for: Any
) -> None:
    # Given: two coders disagreeing fully two days ago, then agreeing on nine steps today
    project.overlap = 2
    project.save(update_fields=["overlap"])
    ann, bob = UserFactory(), UserFactory()
    today = timezone.localdate()
    disputed = ChainFactory(project=project, step_count=1)
    for who, label in ((ann, 1), (bob, -1)):
        made = annotation_with_ratings(chain=disputed, annotator=who, labels=[label])
        Annotation.objects.filter(pk=made.pk).update(created_at=_at(today - timedelta(days=2), 9))
    agreed = ChainFactory(project=project, step_count=9)
    labels = [1, 1, 1, 1, 1, 1, -1, -1, 0]
    for who in (ann, bob):
        made = annotation_with_ratings(chain=agreed, annotator=who, labels=labels)
        Annotation.objects.filter(pk=made.pk).update(created_at=_at(today, 0))
    lead = make_member(project, Role.LEAD)

    per_day = (
        client_for(lead).get(f"/api/v1/projects/{project.pk}/dashboard/").json()["agreement"]
    )["per_day"]

    # Then: a single disagreeing pair is alpha 0 (undefined expected disagreement is
    # not the case: -1 and +1 are both there), unchanged yesterday, higher today
    assert len(per_day) == 3
    assert per_day[0] == pytest.approx(0.0)
    assert per_day[1] == pytest.approx(0.0)
    assert per_day[2] > 0.7


def test_empty_project_has_no_days_and_null_figures(
    project: Project, make_member: Any, client_for: Any
) -> None:
    lead = make_member(project, Role.LEAD)
    data = client_for(lead).get(f"/api/v1/projects/{project.pk}/dashboard/").json()
    assert data["days"] == []
    assert data["throughput"] == []
    assert data["time_per_chain"]["median_ms"] is None
    assert data["agreement"]["alpha"] is None
    assert data["agreement"]["per_day"] == []
    assert data["labels"]["totals"] == {"-1": 0, "0": 0, "1": 0}


@pytest.mark.parametrize(
    ("role", "expected"),
    [("lead", 200), ("annotator", 403), ("ml", 403), (None, 404), ("anonymous", 403)],
)
def test_dashboard_endpoint_access(
    labeled: dict[str, Any], make_member: Any, client_for: Any, role: str | None, expected: int
) -> None:
    project = labeled["project"]
    url = f"/api/v1/projects/{project.pk}/dashboard/"
    if role == "anonymous":
        response = Client().get(url)
        assert response.status_code in (401, 403)
        return
    user = make_member(project, role) if role else UserFactory()
    assert client_for(user).get(url).status_code == expected


def test_dashboard_endpoint_query_count_does_not_grow(
    labeled: dict[str, Any], make_member: Any, client_for: Any, django_assert_num_queries: Any
) -> None:
    project = labeled["project"]
    lead = make_member(project, Role.LEAD)
    client = client_for(lead)
    url = f"/api/v1/projects/{project.pk}/dashboard/"
    # project, role; chains; annotations per (annotator, day); ratings per (day, rating);
    # durations overall and per day; the current ratings (once, for the agreement and
    # its series); agreement usernames; the series' annotation days; gold chains; the
    # chains an import labeled; whether any pass was leased with machine verdicts.
    with django_assert_num_queries(13):
        assert client.get(url).status_code == 200
    # Ten more annotators with a chain each change nothing.
    for _ in range(10):
        chain = ChainFactory(project=project)
        annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[1, 0, -1])
    with django_assert_num_queries(13):
        assert client.get(url).status_code == 200


def test_dashboard_is_in_the_openapi_schema(api_client: Any) -> None:
    schema = api_client.get("/api/schema/", {"format": "json"}).json()
    assert "/api/v1/projects/{project_id}/dashboard/" in schema["paths"]


# --- the page -----------------------------------------------------------------------------


@pytest.fixture
def page_client() -> Any:
    cache.clear()

    def make(user: Any) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return make


def test_lead_gets_the_dashboard_others_the_overview(
    labeled: dict[str, Any], make_member: Any, page_client: Any
) -> None:
    project = labeled["project"]
    url = f"/projects/{project.pk}/"
    lead_html = page_client(make_member(project, Role.LEAD)).get(url).content.decode()
    annotator_html = page_client(labeled["ann"]).get(url).content.decode()
    ml_html = page_client(make_member(project, Role.ML)).get(url).content.decode()

    assert 'id="dashboard"' in lead_html
    assert 'id="dashboard-config"' in lead_html
    # where the page lists flagged chains (who flagged each, why) and clears a flag
    assert f"/api/v1/projects/{project.pk}/flags/" in lead_html
    assert 'id="db-flag-list"' in lead_html
    assert f"/projects/{project.pk}/review/" in lead_html
    assert f"/projects/{project.pk}/models/" in lead_html
    assert "vendor/chartjs/chart.umd.min.js" in lead_html
    for other in (annotator_html, ml_html):
        assert 'id="dashboard"' not in other
        assert "Members" in other
    assert page_client(UserFactory()).get(url).status_code == 404


def test_python_percentiles_match_percentile_cont() -> None:
    # The SQLite demo ranks durations in Python; it must agree with PostgreSQL's
    # percentile_cont (checked above on the same values: 2000 and 2800).
    from annotation.projects.dashboard import DurationStats, _python_percentiles

    assert _python_percentiles([3000, 1000, 2000]) == DurationStats(3, 2000.0, 2800.0)
    assert _python_percentiles([]) == DurationStats(0, None, None)


def test_training_snapshots_are_listed_apart_and_never_replace_the_lead_s(
    labeled: dict[str, Any], make_member: Any, page_client: Any, client_for: Any
) -> None:
    # Given: the lead's snapshot, then one a training run took for itself
    from annotation.datasets.snapshot_reads import snapshot_get, training_snapshots
    from annotation.datasets.snapshots import snapshot_create

    project = labeled["project"]
    lead = make_member(project, Role.LEAD)
    mine = snapshot_create(project=project, user=lead)
    trained = snapshot_create(project=project, user=None, training_run=7)
    measured = snapshot_create(project=project, user=None, evaluation_run=3)

    # Then: the lead's stays "the newest snapshot" for the dashboard and for exports that
    # name no version; the training one is listed apart, with its run
    assert snapshot_get(project=project) == mine
    assert training_snapshots(project=project) == [measured, trained]
    html = page_client(lead).get(f"/projects/{project.pk}/").content.decode()
    assert f"Newest snapshot: <strong>v{mine.version}</strong>" in html
    # (an evaluation run's own snapshot names its run too: it read "for run #" once)
    assert f"t{trained.version} for training run #7" in html
    assert f"t{measured.version} for evaluation run #3" in html
    assert f"format=trl&amp;snapshot={mine.version}" in html
    # ...and every export button says what its file holds
    assert "TRL&#x27;s stepwise schema" in html or "TRL's stepwise schema" in html
    exported = client_for(lead).get(f"/api/v1/projects/{project.pk}/export/", {"format": "csv"})
    assert exported["X-Steplab-Snapshot"] == str(mine.version)


def test_chains_an_import_labeled_are_counted_apart_from_those_people_finished(
    labeled: dict[str, Any], make_member: Any, client_for: Any
) -> None:
    # Given: two chains that came labeled with their import
    project = labeled["project"]
    for chain in (ChainFactory(project=project), ChainFactory(project=project)):
        annotation_with_ratings(chain=chain, labels=[1, 1, -1])
    lead = make_member(project, Role.LEAD)

    # When
    data = client_for(lead).get(f"/api/v1/projects/{project.pk}/dashboard/").json()
    browser = Client()
    browser.force_login(lead)
    page = browser.get(f"/projects/{project.pk}/")

    # Then: the import's labels finish no chain; they are counted apart
    assert data["progress"]["chains_finished"] == 1
    assert data["progress"]["chains_imported"] == 2
    assert data["progress"]["chains_total"] == 5
    text = page.content.decode()
    assert "chains finished by people" in text
    assert "<strong>2</strong> of 5 chains carry labels from an import" in text
    # ...and the Imports card sends the lead to the import page, not to a terminal first
    assert f'id="db-import-link" href="/projects/{project.pk}/import/"' in text

    # When: two more imported chains are in an evaluation set
    held = EvaluationSet.objects.create(project=project, name="held")
    for _ in range(2):
        chain = ChainFactory(project=project, evaluation_set=held)
        annotation_with_ratings(chain=chain, labels=[1, 1, 1])

    # Then: they are not work, so they count in neither figure, which still agree with
    # the database's own count of the work's chains (it once read "414 of 398")
    data = client_for(lead).get(f"/api/v1/projects/{project.pk}/dashboard/").json()
    work = Chain.objects.filter(project=project, is_gold=False, evaluation_set__isnull=True)
    assert data["progress"]["chains_total"] == work.count() == 5
    assert data["progress"]["chains_imported"] == 2
