"""Machine labels beside people's votes: what the review and data manager read paths and
their API show (the newest run per step and source, each source's first error, the
"machines disagree" filter), who may see them, and that they are never votes."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from annotation.chains.selectors import ChainFilters, chain_list
from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.models import Chain, MachineLabel, Role
from annotation.projects.dashboard import project_dashboard
from annotation.quality.agreement import agreement_compute
from annotation.quality.consensus import consensus_for_chains
from annotation.quality.review_reads import chain_disagreements, chain_labels
from annotation.routing.machine_labels import (
    chain_machine_labels,
    machine_chain_labels,
    machine_first_errors,
)
from tests.annotation.labeling.claiming import assignment_claim_next
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings, machine_labels

pytestmark = pytest.mark.django_db


def test_the_newest_run_of_each_source_is_shown_per_step(project):
    # Given a rollout run that rated every step, and a later one that redid step 2 only
    chain = ChainFactory(project=project, step_count=3)
    machine_labels(chain=chain, ratings=[1, 1, 1], values=[0.9, 0.6, 0.5], run_id=1)
    machine_labels(chain=chain, ratings=[None, -1, None], values=[None, 0.0, None], run_id=2)
    MachineLabel.objects.filter(run_id=1).update(created_at=timezone.now() - timedelta(hours=1))
    machine_labels(chain=chain, ratings=[1, 1, -1], source="judge", run_kind="judge", run_id=7)

    # When the chain's machine labels are read
    columns = chain_machine_labels(chain_id=chain.pk, step_count=3)

    # Then each source is one column, in MachineSource order, the newest run per step
    assert [column.source for column in columns] == ["monte_carlo", "judge"]
    rollouts, judge = columns
    assert [v.rating for v in rollouts.verdicts if v] == [1, -1, 1]
    assert [v.run_id for v in rollouts.verdicts if v] == [1, 2, 1]
    assert rollouts.verdicts[1].hard is False  # no rollout from step 2 reached the answer
    assert rollouts.verdicts[0].hard is True
    assert rollouts.first_error == 1
    assert judge.first_error == 2
    assert sorted(rollouts.runs) == ["rollout:1", "rollout:2"]


def test_a_source_of_values_only_names_no_first_error(project):
    chain = ChainFactory(project=project, step_count=2)
    machine_labels(
        chain=chain, ratings=[None, None], values=[0.8, 0.1], source="prm", run_kind="scoring"
    )

    (column,) = chain_machine_labels(chain_id=chain.pk, step_count=2)

    assert column.first_error is None
    assert [v.value for v in column.verdicts if v] == [0.8, 0.1]
    assert machine_first_errors(chain_ids=[chain.pk]) == {}


def test_machine_labels_are_never_votes(project, make_member):
    """Machine labels that contradict the people must change no human figure: consensus,
    agreement, the disagreement list, the finished count, overlap and the dashboard."""
    project.overlap = 2
    project.save(update_fields=["overlap"])
    ann, bob = make_member(project), make_member(project)
    chain = ChainFactory(project=project, step_count=3)
    lease = assignment_claim_next(project=project, user=ann)
    assert lease is not None and lease.chain_id == chain.pk
    steps = list(chain.steps.order_by("index"))
    assignment_submit(
        assignment_id=lease.pk,
        user=ann,
        ratings=[RatingInput(step_id=step.pk, rating=1) for step in steps],
    )
    before = {
        "consensus": consensus_for_chains(
            chain_step_counts={chain.pk: 3}, import_labels=project.import_labels, project=project
        ),
        "agreement": agreement_compute(project=project),
        "dashboard": project_dashboard(project=project),
    }

    # Three machine sources, each calling a step wrong where the person saw none
    machine_labels(chain=chain, ratings=[-1, -1, -1])
    machine_labels(chain=chain, ratings=[1, -1, -1], source="judge", run_kind="judge")
    machine_labels(chain=chain, ratings=[1, 1, -1], source="prm", run_kind="scoring")

    chain.refresh_from_db()
    assert (chain.finished_count, chain.is_finished) == (1, False)
    after = consensus_for_chains(
        chain_step_counts={chain.pk: 3}, import_labels=project.import_labels, project=project
    )
    assert after[chain.pk].labels == before["consensus"][chain.pk].labels == [1, 1, 1]
    assert [vote.by for vote in after[chain.pk].votes] == [ann.username]
    agreement = agreement_compute(project=project)
    assert agreement.ratings == before["agreement"].ratings == 3
    assert agreement.steps == 0 and agreement.first_error_pairs == 0
    assert chain_disagreements(project=project) == []
    dashboard = project_dashboard(project=project)
    assert dashboard.progress == before["dashboard"].progress
    assert dashboard.label_totals == before["dashboard"].label_totals
    labels = chain_labels(chain=Chain.objects.select_related("project", "problem").get())
    assert [column.by for column in labels.columns] == [ann.username]
    assert [step.consensus for step in labels.steps] == [1, 1, 1]
    assert [column.source for column in labels.machine] == ["monte_carlo", "judge", "prm"]
    assert [column.agrees_with_consensus for column in labels.machine] == [False] * 3
    # The overlap still asks a second person for the chain
    second = assignment_claim_next(project=project, user=bob)
    assert second is not None and second.chain_id == chain.pk


def _lead_client(project, make_member, client_for):
    return client_for(make_member(project, Role.LEAD))


def test_labels_api_shows_each_source_beside_the_votes(project, make_member, client_for):
    chain = ChainFactory(project=project, step_count=3)
    annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[1, -1, None])
    machine_labels(chain=chain, ratings=[1, -1, -1], values=[0.75, 0.0, 0.0], confidence=0.9)
    machine_labels(chain=chain, ratings=[1, 1, None], source="judge", run_kind="judge", run_id=4)

    response = _lead_client(project, make_member, client_for).get(
        f"/api/v1/chains/{chain.pk}/labels/"
    )

    assert response.status_code == 200
    body = response.json()
    assert [column["source"] for column in body["columns"]] == ["human"]
    rollouts, judge = body["machine"]
    assert (rollouts["source"], rollouts["name"]) == ("monte_carlo", "Monte-Carlo rollouts")
    assert (rollouts["first_error"], rollouts["agrees_with_consensus"]) == (1, True)
    assert (judge["first_error"], judge["agrees_with_consensus"]) == (-1, False)
    first = rollouts["steps"][0]
    assert first["rating"] == 1 and first["value"] == 0.75 and first["confidence"] == 0.9
    assert first["hard"] is True and first["model"] == "tiny-decoder"
    assert (first["run_kind"], first["run_id"]) == ("rollout", 1)
    assert judge["runs"] == ["judge:4"]
    assert judge["steps"][2] is None  # the judge gave step 3 no label
    assert [step["ratings"] for step in body["steps"]] == [[1], [-1], [None]]


@pytest.mark.parametrize(("role", "status"), [("annotator", 403), ("ml", 403), (None, 404)])
def test_only_leads_see_machine_labels(project, make_member, client_for, role, status):
    chain = ChainFactory(project=project)
    machine_labels(chain=chain, ratings=[1, -1, -1])
    client = client_for(make_member(project, role) if role else UserFactory())

    for url in (
        f"/api/v1/chains/{chain.pk}/labels/",
        f"/api/v1/chains/{chain.pk}/",
        f"/api/v1/projects/{project.pk}/chains/",
        f"/api/v1/projects/{project.pk}/chains/?machines_disagree=true",
    ):
        response = client.get(url)
        assert response.status_code == status, url
        assert "machine" not in response.content.decode()


def test_list_shows_first_errors_and_filters_machines_disagreeing(project, make_member, client_for):
    agree, differ, alone, none = (ChainFactory(project=project, step_count=3) for _ in range(4))
    for chain in (agree, differ):
        machine_labels(chain=chain, ratings=[1, -1, -1])
    # On ``agree`` a first judge run saw the error at step 1; a later run moved it to
    # step 2, where the rollouts see it: only the newest run counts
    machine_labels(chain=agree, ratings=[-1, None, None], source="judge", run_kind="judge")
    machine_labels(chain=agree, ratings=[1, -1, None], source="judge", run_kind="judge", run_id=2)
    machine_labels(chain=differ, ratings=[1, 1, 1], source="judge", run_kind="judge")
    machine_labels(chain=alone, ratings=[-1, -1, -1])
    client = _lead_client(project, make_member, client_for)

    listed = client.get(f"/api/v1/projects/{project.pk}/chains/").json()["results"]
    disagree = client.get(f"/api/v1/projects/{project.pk}/chains/?machines_disagree=true")

    assert {row["id"]: row["machine_first_errors"] for row in listed} == {
        agree.pk: {"monte_carlo": 1, "judge": 1},
        differ.pk: {"monte_carlo": 1, "judge": -1},
        alone.pk: {"monte_carlo": 0},
        none.pk: {},
    }
    assert disagree.status_code == 200
    assert [row["id"] for row in disagree.json()["results"]] == [differ.pk]
    # the selector reads the same filter
    page = chain_list(project=project, filters=ChainFilters(machines_disagree=True))
    assert [row.chain_id for row in page.rows] == [differ.pk]


def test_machines_disagree_refuses_what_is_not_a_boolean(project, make_member, client_for):
    client = _lead_client(project, make_member, client_for)

    response = client.get(f"/api/v1/projects/{project.pk}/chains/?machines_disagree=perhaps")

    assert response.status_code == 400
    assert "machines_disagree" in response.json()


def test_a_source_s_chain_labels_are_its_newest_verdicts_as_sure_as_the_least_sure_step(project):
    # Given a rollout run and a later one redoing step 1, and a judge sure to 0.6 and 0.9
    chain = ChainFactory(project=project, step_count=3)
    other = ChainFactory(project=project, step_count=2)
    machine_labels(chain=chain, ratings=[1, 1, 1], run_id=1)
    machine_labels(chain=chain, ratings=[None, -1, None], run_id=2)
    MachineLabel.objects.filter(run_id=1).update(created_at=timezone.now() - timedelta(hours=1))
    judge = machine_labels(chain=other, ratings=[1, -1], source="judge", run_kind="judge")
    MachineLabel.objects.filter(pk=judge[0].pk).update(confidence=0.9)
    MachineLabel.objects.filter(pk=judge[1].pk).update(confidence=0.6)

    # When each source's chain labels are read
    rollouts = machine_chain_labels(project_id=project.pk, source="monte_carlo")
    judged = machine_chain_labels(project_id=project.pk, source="judge")

    # Then: the newest verdict per step; no stated confidence reads as sure
    assert rollouts == {chain.pk: ((1, -1, 1), 1.0)}
    assert judged == {other.pk: ((1, -1), 0.6)}


def test_filter_machines_disagreeing_with_a_person(project, make_member, client_for):
    agree, differ, machines_only, people_only, split = (
        ChainFactory(project=project, step_count=3) for _ in range(5)
    )
    ann, bob = UserFactory(), UserFactory()
    annotation_with_ratings(chain=agree, annotator=ann, labels=[1, -1, None])  # first error
    machine_labels(chain=agree, ratings=[1, -1, -1])
    machine_labels(chain=agree, ratings=[1, -1, None], source="judge", run_kind="judge")
    annotation_with_ratings(chain=differ, annotator=ann, labels=[1, 1, 1])
    machine_labels(chain=differ, ratings=[1, 1, -1])
    # The person sees the error before the machine does (and, above, after it)
    later = ChainFactory(project=project, step_count=3)
    annotation_with_ratings(chain=later, annotator=ann, labels=[1, -1, None])
    machine_labels(chain=later, ratings=[1, 1, -1])
    machine_labels(chain=machines_only, ratings=[-1, -1, -1])
    annotation_with_ratings(chain=people_only, annotator=ann, labels=[-1, None, None])
    # Two people apart: the rollouts side with one, so they differ from the other
    annotation_with_ratings(chain=split, annotator=ann, labels=[1, -1, None])
    annotation_with_ratings(chain=split, annotator=bob, labels=[1, 1, 1])
    machine_labels(chain=split, ratings=[1, -1, -1])
    # A person's superseded pass no longer counts: ann revised ``agree``'s from [1, 1, 1]
    old = annotation_with_ratings(chain=agree, annotator=bob, labels=[1, 1, 1])
    annotation_with_ratings(chain=agree, annotator=bob, labels=[1, -1, None], supersedes=old)
    client = _lead_client(project, make_member, client_for)

    response = client.get(f"/api/v1/projects/{project.pk}/chains/?machines_vs_people=true")

    assert response.status_code == 200
    assert sorted(row["id"] for row in response.json()["results"]) == sorted(
        [differ.pk, split.pk, later.pk]
    )
