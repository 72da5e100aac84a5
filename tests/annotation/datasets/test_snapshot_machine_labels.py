"""Machine labels in snapshots: left out unless the lead includes their source; then
carried on every row beside the consensus (the newest run per step), the labels of a
chain no person labeled taken from the first included source that rated it, and counted
apart. Never a vote on a chain people labeled."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from annotation.datasets.snapshots import snapshot_create
from annotation.models import MachineLabel, SnapshotChain
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings, machine_labels

pytestmark = pytest.mark.django_db


@pytest.fixture
def chains(project):
    """``people``: one finished human pass and machine labels that contradict it;
    ``machines``: labeled by the rollouts and a judge only; ``flagged``: machines only,
    flagged as broken; ``started``: a person's pass short of the overlap, and rollouts."""
    people = ChainFactory(project=project, step_count=3, is_finished=True, finished_count=1)
    annotation_with_ratings(chain=people, annotator=UserFactory(), labels=[1, 1, 1])
    machine_labels(chain=people, ratings=[1, -1, -1], values=[0.5, 0.0, 0.0])
    machines = ChainFactory(project=project, step_count=3)
    machine_labels(
        chain=machines, ratings=[1, 1, -1], values=[1.0, 0.75, 0.0], model="policy", run_id=1
    )
    # a later rollout run redid step 2: the newest is what a snapshot takes
    machine_labels(
        chain=machines, ratings=[None, -1, None], values=[None, 0.0, None], model="policy", run_id=2
    )
    machine_labels(chain=machines, ratings=[1, -1, None], source="judge", run_kind="judge")
    flagged = ChainFactory(project=project, step_count=2, is_flagged=True)
    machine_labels(chain=flagged, ratings=[1, -1])
    project.overlap = 2
    project.save(update_fields=["overlap"])
    started = ChainFactory(project=project, step_count=2, finished_count=1)
    annotation_with_ratings(chain=started, annotator=UserFactory(), labels=[1, 1])
    machine_labels(chain=started, ratings=[-1, -1])
    return {"people": people, "machines": machines, "flagged": flagged, "started": started}


def _rows(snapshot) -> dict[int, SnapshotChain]:
    return {row.chain_id: row for row in SnapshotChain.objects.filter(snapshot=snapshot)}


def test_a_snapshot_without_machine_sources_ignores_them(project, chains):
    snapshot = snapshot_create(project=project, heldout_fraction=0.0)

    rows = _rows(snapshot)
    assert list(rows) == [chains["people"].pk]
    assert rows[chains["people"].pk].labels == [1, 1, 1]
    assert rows[chains["people"].pk].machine == {}
    assert "machine" not in snapshot.counts and "machine_rows" not in snapshot.counts
    assert snapshot.meta["options"]["machine_sources"] == []
    # Without the machine labels the same snapshot hashes the same
    MachineLabel.objects.all().delete()
    assert snapshot_create(project=project, heldout_fraction=0.0).content_hash == (
        snapshot.content_hash
    )


def test_included_sources_ride_along_and_label_chains_no_person_labeled(project, chains):
    people_only = snapshot_create(project=project, heldout_fraction=0.0)

    snapshot = snapshot_create(
        project=project, heldout_fraction=0.0, machine_sources=["judge", "monte_carlo"]
    )

    rows = _rows(snapshot)
    # The flagged chain and the unfinished one stay out, as finished_only says
    assert sorted(rows) == sorted([chains["people"].pk, chains["machines"].pk])
    people, machines = rows[chains["people"].pk], rows[chains["machines"].pk]
    # People's consensus stands: the machines' -1s are no votes
    assert people.labels == [1, 1, 1]
    assert [vote["source"] for vote in people.votes] == ["human"]
    assert people.machine["labels_from"] is None
    assert [cell["rating"] for cell in people.machine["sources"]["monte_carlo"]] == [1, -1, -1]
    # The machines' chain takes the judge's labels, the first source in the lead's order
    assert machines.labels == [1, -1, None]
    assert machines.support == [None, None, None]
    assert machines.votes == []
    assert machines.machine["labels_from"] == "judge"
    assert list(machines.machine["sources"]) == ["judge", "monte_carlo"]
    rollouts = machines.machine["sources"]["monte_carlo"]
    assert [cell["value"] for cell in rollouts] == [1.0, 0.0, 0.0]  # run 2 on step 2
    assert [cell["hard"] for cell in rollouts] == [True, False, False]
    assert [cell["run"] for cell in rollouts] == ["rollout:1", "rollout:2", "rollout:1"]
    assert rollouts[0]["model"] == "policy"
    assert machines.machine["sources"]["judge"][2] is None
    # Counted apart
    assert snapshot.counts["chains"] == 2
    assert snapshot.counts["sources"] == {"human": 1, "import": 0}
    assert snapshot.counts["machine"] == {"judge": 1, "monte_carlo": 0}
    assert snapshot.counts["machine_rows"] == {"judge": 1, "monte_carlo": 2}
    assert snapshot.meta["sources"] == ["human", "machine:judge", "machine:monte_carlo"]
    assert snapshot.meta["options"]["machine_sources"] == ["judge", "monte_carlo"]
    # Machine labels are hashed: the same people's labels with them hash otherwise
    assert snapshot.content_hash != people_only.content_hash


def test_the_lead_order_picks_the_source_that_labels(project, chains):
    snapshot = snapshot_create(
        project=project, heldout_fraction=0.0, machine_sources=["monte_carlo", "judge"]
    )

    machines = _rows(snapshot)[chains["machines"].pk]
    assert machines.labels == [1, -1, -1]
    assert snapshot.counts["machine"] == {"monte_carlo": 1, "judge": 0}


def test_without_finished_only_a_started_chain_keeps_its_peoples_labels(project, chains):
    snapshot = snapshot_create(
        project=project, heldout_fraction=0.0, finished_only=False, machine_sources=["monte_carlo"]
    )

    started = _rows(snapshot)[chains["started"].pk]
    assert started.labels == [1, 1]
    assert started.machine["labels_from"] is None


@pytest.mark.parametrize("sources", [["oracle"], ["judge", "judge"]])
def test_unknown_or_repeated_sources_are_refused(project, chains, sources):
    with pytest.raises(ValidationError) as refused:
        snapshot_create(project=project, machine_sources=sources)

    assert "machine_sources" in refused.value.message_dict


def test_the_api_takes_machine_sources_and_refuses_unknown_ones(
    project, chains, make_member, client_for
):
    client = client_for(make_member(project, "lead"))
    url = f"/api/v1/projects/{project.pk}/snapshots/"

    taken = client.post(url, {"machine_sources": ["monte_carlo"]}, format="json")
    unknown = client.post(url, {"machine_sources": ["oracle"]}, format="json")
    twice = client.post(url, {"machine_sources": ["judge", "judge"]}, format="json")
    stray = client.post(url, {"machine_source": ["judge"]}, format="json")

    assert taken.status_code == 201, taken.content
    body = taken.json()
    assert body["options"]["machine_sources"] == ["monte_carlo"]
    assert body["counts"]["machine"] == {"monte_carlo": 1}
    assert (unknown.status_code, list(unknown.json())) == (400, ["machine_sources"])
    assert (twice.status_code, list(twice.json())) == (400, ["machine_sources"])
    assert stray.status_code == 400 and "machine_source" in stray.json()
