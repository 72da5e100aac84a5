"""The data manager: each filter of the chain list, its keyset pages and their query
count, the chain's detail, the requeue service, and the API's statuses and payloads."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.chains.selectors import ChainFilters, ChainStatus, chain_detail, chain_list
from annotation.chains.services import chain_requeue
from annotation.labeling.workspace import chain_flag_clear
from annotation.models import Assignment, AssignmentStatus, Chain, Role, Step
from annotation.quality.chain_agreement import chains_agreement_refresh
from annotation.quality.gold import gold_mark
from annotation.quality.review import AdjudicatedRating, adjudication_create
from prm_training.models import ChainScore, RunStatus, chain_aggregates
from tests.factories import (
    ChainFactory,
    MembershipFactory,
    ProjectFactory,
    UserFactory,
    annotation_with_ratings,
    scoring_run_with_model_version,
)

pytestmark = pytest.mark.django_db


def _chain(project, *, steps=("a", "b", "c"), **fields) -> Chain:
    chain = ChainFactory(project=project, step_count=len(steps), **fields)
    for index, text in enumerate(steps):
        Step.objects.filter(chain=chain, index=index).update(text=text)
    return chain


def _ids(project, **filters) -> list[int]:
    return [
        row.chain_id for row in chain_list(project=project, filters=ChainFilters(**filters)).rows
    ]


@pytest.fixture
def world():
    project = ProjectFactory(overlap=2)
    ann1, ann2 = UserFactory(), UserFactory()
    unlabeled = _chain(project)
    leased = _chain(project)
    Assignment.objects.create(
        project=project,
        chain=leased,
        annotator=ann1,
        expires_at=timezone.now() + timedelta(minutes=5),
    )
    half = _chain(project, steps=("find the integral", "b", "c"))
    annotation_with_ratings(chain=half, labels=[1, 1, 1], annotator=ann1)
    Chain.objects.filter(pk=half.pk).update(finished_count=1)
    agreed = _chain(project)
    disputed = _chain(project)
    ruled = _chain(project)
    for chain, second in ((agreed, [1, 1, 1]), (disputed, [1, -1, 1]), (ruled, [1, -1, 1])):
        annotation_with_ratings(chain=chain, labels=[1, 1, 1], annotator=ann1)
        annotation_with_ratings(chain=chain, labels=second, annotator=ann2)
    Chain.objects.filter(pk__in=[agreed.pk, disputed.pk, ruled.pk]).update(
        finished_count=2, is_finished=True
    )
    # A lead ruled on the second disputed chain: it is resolved.
    adjudication_create(
        chain=ruled,
        lead=UserFactory(),
        ratings=[AdjudicatedRating(step_id=ruled.steps.get(index=1).pk, rating=-1)],
    )
    # Written past the submit, so the agreement it keeps is worked out here, as it would.
    chains_agreement_refresh(chains=Chain.objects.filter(project=project))
    flagged = _chain(project, is_flagged=True, flag_reason="garbled step", flagged_by=ann2)
    skipped = _chain(project)
    Assignment.objects.create(
        project=project,
        chain=skipped,
        annotator=ann2,
        status=AssignmentStatus.SKIPPED,
        skip_reason="too long",
        expires_at=timezone.now(),
    )
    gold = _chain(project)
    annotation_with_ratings(chain=gold, labels=[1, 0, -1])
    gold_mark(project=project, chain_ids=[gold.pk])
    return {
        "project": project,
        "ann1": ann1,
        "ann2": ann2,
        **{
            name: chain.pk
            for name, chain in {
                "unlabeled": unlabeled,
                "leased": leased,
                "half": half,
                "agreed": agreed,
                "disputed": disputed,
                "ruled": ruled,
                "flagged": flagged,
                "skipped": skipped,
                "gold": gold,
            }.items()
        },
    }


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (ChainStatus.UNLABELED, ["unlabeled", "flagged", "skipped"]),
        (ChainStatus.IN_PROGRESS, ["leased", "half"]),
        (ChainStatus.FINISHED, ["agreed", "disputed", "ruled"]),
        (ChainStatus.DISPUTED, ["disputed"]),
        (ChainStatus.RESOLVED, ["ruled"]),
        (ChainStatus.FLAGGED, ["flagged"]),
        (ChainStatus.SKIPPED, ["skipped"]),
        (ChainStatus.GOLD, ["gold"]),
    ],
)
def test_each_status_filter(world, status: str, expected: list[str]) -> None:
    assert _ids(world["project"], statuses=(status,)) == sorted(world[n] for n in expected)


def test_statuses_combine_with_or(world) -> None:
    got = _ids(world["project"], statuses=(ChainStatus.GOLD, ChainStatus.FLAGGED))
    assert got == sorted([world["gold"], world["flagged"]])


def test_annotator_filter_lists_the_chains_they_labeled(world) -> None:
    project = world["project"]
    assert _ids(project, annotator=world["ann1"].pk) == sorted(
        world[n] for n in ("half", "agreed", "disputed", "ruled")
    )
    assert _ids(project, annotator=world["ann2"].pk) == sorted(
        world[n] for n in ("agreed", "disputed", "ruled")
    )


def test_agreement_filter_and_column(world) -> None:
    project = world["project"]
    assert _ids(project, max_agreement=0.7) == [world["disputed"], world["ruled"]]
    rows = {row.chain_id: row for row in chain_list(project=project, filters=ChainFilters()).rows}
    assert rows[world["disputed"]].agreement == pytest.approx(2 / 3)
    assert rows[world["agreed"]].agreement == pytest.approx(1.0)
    assert rows[world["half"]].agreement is None
    assert rows[world["disputed"]].status == ChainStatus.DISPUTED
    # A ruling settles the dispute: the chain reads resolved, in the list and on its page
    assert rows[world["ruled"]].status == ChainStatus.RESOLVED
    ruled = Chain.objects.select_related("project").get(pk=world["ruled"])
    assert chain_detail(chain=ruled).status == ChainStatus.RESOLVED


def test_search_over_problems_and_steps(world) -> None:
    project = world["project"]
    assert _ids(project, search="integral") == [world["half"]]
    problem = Chain.objects.get(pk=world["gold"]).problem
    problem.text = "A triangle's hypotenuse"
    problem.save()
    assert _ids(project, search="hypotenuse") == [world["gold"]]
    assert _ids(project, search="nowhere-to-be-found") == []


def test_a_searched_list_pages_through_every_match_once(world) -> None:
    # Given: a word in most chains' steps, in one chain's problem only, and in another
    # project's chain
    project = world["project"]
    Step.objects.filter(chain__project=project, index=1).exclude(chain_id=world["flagged"]).update(
        text="count the tilings"
    )
    problem = Chain.objects.get(pk=world["flagged"]).problem
    problem.text = "How many tilings?"
    problem.save()
    _chain(ProjectFactory(), steps=("tilings", "b"))
    # When: the search is walked two chains at a time
    seen: list[int] = []
    after = None
    while True:
        page = chain_list(
            project=project, filters=ChainFilters(search="tilings"), after=after, limit=2
        )
        seen += [row.chain_id for row in page.rows]
        if page.next_after is None:
            break
        after = page.next_after
    # Then: every chain of the project, by id, each once
    assert seen == sorted(Chain.objects.filter(project=project).values_list("pk", flat=True))


def test_prm_score_and_uncertainty_filters(world) -> None:
    project = world["project"]
    run = scoring_run_with_model_version(
        project=project,
        content_hash="h",
        status=RunStatus.SUCCEEDED,
        finished_at=timezone.now(),
    )
    for chain, probs in ((world["unlabeled"], [0.9, 0.2]), (world["leased"], [0.95, 0.99])):
        score, uncertainty = chain_aggregates(probs)
        ChainScore.objects.create(
            scoring_run=run,
            chain_id=chain,
            step_probs=probs,
            chain_score=score,
            chain_uncertainty=uncertainty,
        )
    assert _ids(project, max_score=0.5) == [world["unlabeled"]]
    assert _ids(project, min_score=0.5) == [world["leased"]]
    # 1 - |2p - 1| at the least sure step: 0.4 for p = 0.2, 0.1 for p = 0.95.
    assert _ids(project, min_uncertainty=0.3) == [world["unlabeled"]]
    assert _ids(project, max_uncertainty=0.2) == [world["leased"]]
    row = chain_list(project=project, filters=ChainFilters(max_score=0.5)).rows[0]
    assert row.prm_score == pytest.approx(0.2)
    assert row.prm_uncertainty == pytest.approx(0.4)
    detail = chain_detail(chain=Chain.objects.select_related("project").get(pk=world["unlabeled"]))
    assert detail.step_scores == pytest.approx([0.9, 0.2])


def test_keyset_pages_walk_every_chain_once(world) -> None:
    project = world["project"]
    seen: list[int] = []
    after = None
    while True:
        page = chain_list(project=project, filters=ChainFilters(), after=after, limit=3)
        seen += [row.chain_id for row in page.rows]
        if page.next_after is None:
            break
        after = page.next_after
    assert seen == sorted(Chain.objects.filter(project=project).values_list("pk", flat=True))


@pytest.mark.parametrize("limit", [1, 8])
def test_a_page_costs_three_queries_whatever_its_size(world, limit: int) -> None:
    filters = ChainFilters(statuses=(ChainStatus.FINISHED, ChainStatus.UNLABELED), search="b")
    with CaptureQueriesContext(connection) as queries:
        chain_list(project=world["project"], filters=filters, limit=limit)
    # the page, the newest scoring run, and the page's machine labels
    assert len(queries) == 3


def test_detail_lists_leases_with_skip_reasons(world) -> None:
    chain = Chain.objects.select_related("project").get(pk=world["skipped"])
    detail = chain_detail(chain=chain)
    assert [(lease.annotator, lease.status, lease.reason) for lease in detail.leases] == [
        (world["ann2"].username, "skipped", "too long")
    ]
    assert detail.status == ChainStatus.SKIPPED
    assert [step.text for step in detail.steps] == ["a", "b", "c"]


# --------------------------------------------------------------------------- services


def test_requeue_asks_a_finished_chain_for_one_more_pass(world) -> None:
    chain = Chain.objects.get(pk=world["agreed"])
    requeued = chain_requeue(chain=chain, more=1)
    assert (requeued.extra_labels, requeued.is_finished) == (1, False)
    assert chain_detail(chain=Chain.objects.select_related("project").get(pk=chain.pk)).needed == 3
    assert world["agreed"] in _ids(world["project"], statuses=(ChainStatus.IN_PROGRESS,))


def test_a_requeued_chain_counts_its_extra_pass_in_the_project_s_progress(world) -> None:
    from annotation.projects.dashboard import project_dashboard

    # Given the project's progress before a lead asks one chain for one more pass
    project = world["project"]
    before = project_dashboard(project=project).progress

    # When the chain is requeued
    chain_requeue(chain=Chain.objects.get(pk=world["agreed"]), more=1)

    # Then the project needs one pass more and is one finished chain short
    after = project_dashboard(project=project).progress
    assert after.annotations_needed == before.annotations_needed + 1
    assert after.annotations_finished == before.annotations_finished
    assert after.chains_finished == before.chains_finished - 1


def test_requeue_refuses_gold_and_out_of_range(world) -> None:
    with pytest.raises(ValidationError):
        chain_requeue(chain=Chain.objects.get(pk=world["gold"]))
    with pytest.raises(ValidationError):
        chain_requeue(chain=Chain.objects.get(pk=world["agreed"]), more=0)
    # A chain that already has far more passes than the overlap (it was lowered) cannot
    # ask for more past the cap: refused, not answered "requeued" while still finished
    many = Chain.objects.get(pk=world["agreed"])
    Chain.objects.filter(pk=many.pk).update(finished_count=many.project.overlap + 50)
    with pytest.raises(ValidationError):
        chain_requeue(chain=many, more=1)
    assert Chain.objects.get(pk=many.pk).is_finished


def test_unflag_and_mark_gold_through_their_services(world) -> None:
    lead = MembershipFactory(project=world["project"], role=Role.LEAD).user
    cleared = chain_flag_clear(chain=Chain.objects.get(pk=world["flagged"]), user=lead)
    assert not cleared.is_flagged and cleared.flag_cleared_by == lead
    assert world["flagged"] not in _ids(world["project"], statuses=(ChainStatus.FLAGGED,))
    annotation_with_ratings(chain=Chain.objects.get(pk=world["unlabeled"]), labels=[1, 1, 1])
    gold_mark(project=world["project"], chain_ids=[world["unlabeled"]])
    assert world["unlabeled"] in _ids(world["project"], statuses=(ChainStatus.GOLD,))


# --------------------------------------------------------------------------- API


def _client(project, role: str) -> APIClient:
    client = APIClient()
    client.force_authenticate(MembershipFactory(project=project, role=role).user)
    return client


def test_api_list_filters_pages_and_payload(world) -> None:
    project = world["project"]
    lead = _client(project, Role.LEAD)
    url = f"/api/v1/projects/{project.pk}/chains/"
    body = lead.get(url, {"status": ["flagged", "gold"]}).json()
    assert [row["id"] for row in body["results"]] == sorted([world["flagged"], world["gold"]])
    assert body["next_after"] is None
    row = body["results"][0]
    assert set(row) >= {"problem", "status", "finished_count", "needed", "agreement", "prm_score"}
    first = lead.get(url, {"limit": 2}).json()
    assert len(first["results"]) == 2 and first["next_after"] == first["results"][1]["id"]
    second = lead.get(url, {"limit": 2, "after": first["next_after"]}).json()
    assert second["results"][0]["id"] > first["next_after"]
    assert lead.get(url, {"status": "nonsense"}).status_code == 400
    assert lead.get(url, {"max_score": 2}).status_code == 400
    outsider = UserFactory()
    assert lead.get(url, {"annotator": outsider.pk}).status_code == 400
    assert lead.get(url, {"annotator": world["ann1"].pk}).status_code == 400  # not a member
    MembershipFactory(project=project, user=world["ann1"])
    assert lead.get(url, {"annotator": world["ann1"].pk}).status_code == 200


def test_api_is_for_leads_only(world) -> None:
    project = world["project"]
    for role in (Role.ANNOTATOR, Role.ML):
        client = _client(project, role)
        assert client.get(f"/api/v1/projects/{project.pk}/chains/").status_code == 403
        assert client.get(f"/api/v1/chains/{world['gold']}/").status_code == 403
        assert client.post(f"/api/v1/chains/{world['agreed']}/requeue/").status_code == 403
    stranger = APIClient()
    stranger.force_authenticate(UserFactory())
    assert stranger.get(f"/api/v1/chains/{world['gold']}/").status_code == 404


def test_api_detail_and_requeue(world) -> None:
    lead = _client(world["project"], Role.LEAD)
    detail = lead.get(f"/api/v1/chains/{world['flagged']}/").json()
    assert detail["status"] == "flagged"
    assert detail["flag_reason"] == "garbled step"
    assert detail["flagged_by"] == world["ann2"].username
    assert [step["text"] for step in detail["steps"]] == ["a", "b", "c"]
    assert detail["step_scores"] is None
    answer = lead.post(f"/api/v1/chains/{world['agreed']}/requeue/", {"more": 2}, format="json")
    assert answer.status_code == 200
    assert (answer.json()["needed"], answer.json()["is_finished"]) == (4, False)
    gold = lead.post(f"/api/v1/chains/{world['gold']}/requeue/", {}, format="json")
    assert gold.status_code == 400
