"""Verification (issue 23, item 6): the queue shows each step's machine verdict when the
project pre-labels, holds a keyed share of chains out, and records per rating whether it
confirmed or overrode what the lease showed. Over the API, on PostgreSQL."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from annotation.labeling.queue.prelabels import prelabel_held_out
from annotation.models import (
    Annotation,
    Assignment,
    Chain,
    MachineSource,
    PrelabelOutcome,
    StepRating,
)
from annotation.public_ids import CHAIN_IDS
from annotation.quality.gold import gold_mark
from prm_training.services import autostart
from tests import factories
from tests.factories import ChainFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


_runs = itertools.count(1)


def machine_labels(
    chain: Chain,
    ratings: list[int | None],
    *,
    source: str = MachineSource.JUDGE,
    values: list[float | None] | None = None,
) -> None:
    """One new machine run's labels on ``chain`` (``factories.machine_labels``)."""
    factories.machine_labels(
        chain=chain,
        ratings=ratings,
        source=source,
        values=values,
        run_kind="judge" if source == MachineSource.JUDGE else "scoring",
        run_id=next(_runs),
    )


def next_url(project) -> str:
    return f"/api/v1/projects/{project.pk}/assignments/next/"


def submit_url(lease: dict) -> str:
    return f"/api/v1/assignments/{lease['assignment']['id']}/submit/"


def lease_next(client, project) -> dict:
    response = client.post(next_url(project))
    assert response.status_code == 200, response.content
    return response.json()


def submit(client, lease: dict, ratings: list[int], **extra: Any):
    body = {
        "ratings": [
            {"step": step["id"], "rating": rating}
            for step, rating in zip(lease["chain"]["steps"], ratings, strict=False)
        ],
        **extra,
    }
    return client.post(submit_url(lease), body, format="json")


def outcomes(chain: Chain, user) -> list[tuple[str, str]]:
    annotation = Annotation.objects.get(chain=chain, annotator=user)
    return list(
        annotation.ratings.order_by("step__index").values_list("prelabel", "prelabel_source")
    )


@pytest.fixture
def prelabeled(project):
    project.prelabels = True
    project.prelabel_holdout = 0.0
    project.save()
    return project


def test_off_by_default_shows_nothing_and_records_none(project, make_member, client_for):
    # Given: a project as created (pre-labels off) whose chain has judge verdicts
    assert project.prelabels is False and project.prelabel_source == MachineSource.JUDGE
    assert project.prelabel_holdout == pytest.approx(0.1)
    chain = ChainFactory(project=project)
    machine_labels(chain, [1, 1, -1])
    user = make_member(project)
    client = client_for(user)

    # When: the annotator leases and submits
    lease = lease_next(client, project)
    assert submit(client, lease, [1, 1, 1]).status_code == 201

    # Then: no verdict was shown, none recorded
    assert lease["chain"]["prelabel_source"] is None
    assert [s["prelabel"] for s in lease["chain"]["steps"]] == [None, None, None]
    assert outcomes(chain, user) == [(PrelabelOutcome.NONE, "")] * 3
    assert Assignment.objects.get(chain=chain).prelabel_source == ""


def test_accept_all_records_every_step_confirmed(prelabeled, make_member, client_for):
    # Given: judge verdicts, an older judge run that the newer one replaces, and PRM
    # probabilities (another source, never shown)
    chain = ChainFactory(project=prelabeled, step_count=4)
    machine_labels(chain, [-1, -1, -1, -1])
    machine_labels(chain, [1, 1, -1, 0])
    machine_labels(chain, [None] * 4, source=MachineSource.PRM, values=[0.1, 0.1, 0.9, 0.9])
    user = make_member(prelabeled)
    client = client_for(user)

    # When: the lease shows the newest judge verdicts and the annotator accepts them all
    lease = lease_next(client, prelabeled)
    shown = [s["prelabel"] for s in lease["chain"]["steps"]]
    assert lease["chain"]["prelabel_source"] == MachineSource.JUDGE
    assert shown == [1, 1, -1, 0]
    assert submit(client, lease, shown).status_code == 201

    # Then: each rating confirmed the judge
    assert outcomes(chain, user) == [(PrelabelOutcome.CONFIRMED, MachineSource.JUDGE)] * 4


def test_override_one_step_and_steps_without_a_verdict(prelabeled, make_member, client_for):
    # Given: judge verdicts on steps 1 and 3 only
    chain = ChainFactory(project=prelabeled, step_count=3)
    machine_labels(chain, [1, None, 1])
    user = make_member(prelabeled)
    client = client_for(user)
    lease = lease_next(client, prelabeled)
    assert [s["prelabel"] for s in lease["chain"]["steps"]] == [1, None, 1]

    # When: the annotator keeps step 1, rates step 2 (no verdict) and overrides step 3
    assert submit(client, lease, [1, 1, -1]).status_code == 201

    # Then: confirmed, none, overridden
    assert outcomes(chain, user) == [
        (PrelabelOutcome.CONFIRMED, MachineSource.JUDGE),
        (PrelabelOutcome.NONE, ""),
        (PrelabelOutcome.OVERRIDDEN, MachineSource.JUDGE),
    ]


def test_a_probability_source_shows_its_side_of_one_half(prelabeled, make_member, client_for):
    # Given: the project pre-labels from the PRM, which gives values and no ratings
    prelabeled.prelabel_source = MachineSource.PRM
    prelabeled.save()
    chain = ChainFactory(project=prelabeled, step_count=3)
    machine_labels(chain, [None] * 3, source=MachineSource.PRM, values=[0.93, 0.5, 0.2])
    client = client_for(make_member(prelabeled))

    # Then: P(correct) >= 0.5 shows as +1, below as -1
    lease = lease_next(client, prelabeled)
    assert [s["prelabel"] for s in lease["chain"]["steps"]] == [1, 1, -1]
    assert lease["chain"]["prelabel_source"] == MachineSource.PRM


def test_the_submit_compares_with_what_the_lease_showed(prelabeled, make_member, client_for):
    # Given: a lease showing judge verdicts +1 +1 +1
    chain = ChainFactory(project=prelabeled)
    machine_labels(chain, [1, 1, 1])
    user = make_member(prelabeled)
    client = client_for(user)
    lease = lease_next(client, prelabeled)

    # When: a new judge run lands mid-lease, and the page asks next again (same lease)
    machine_labels(chain, [-1, -1, -1])
    again = lease_next(client, prelabeled)
    assert again["assignment"]["id"] == lease["assignment"]["id"]
    assert [s["prelabel"] for s in again["chain"]["steps"]] == [1, 1, 1]
    assert submit(client, lease, [1, 1, -1]).status_code == 201

    # Then: the outcome is measured against what was shown, not the newer run
    assert [o for o, _ in outcomes(chain, user)] == [
        PrelabelOutcome.CONFIRMED,
        PrelabelOutcome.CONFIRMED,
        PrelabelOutcome.OVERRIDDEN,
    ]


def test_a_held_out_chain_shows_no_verdicts_and_keeps_them_for_the_dashboard(
    prelabeled, make_member, client_for
):
    # Given: every chain held out
    prelabeled.prelabel_holdout = 1.0
    prelabeled.save()
    chain = ChainFactory(project=prelabeled)
    machine_labels(chain, [1, -1, 1])
    user = make_member(prelabeled)
    client = client_for(user)

    # When: leased and submitted
    lease = lease_next(client, prelabeled)
    assert submit(client, lease, [1, -1, 1]).status_code == 201

    # Then: nothing was shown, nothing counts as confirmed, and the lease kept the
    # verdicts it held back
    assert lease["chain"]["prelabel_source"] is None
    assert [s["prelabel"] for s in lease["chain"]["steps"]] == [None, None, None]
    assert outcomes(chain, user) == [(PrelabelOutcome.NONE, "")] * 3
    stored = Assignment.objects.get(chain=chain)
    assert stored.prelabels == {"0": 1, "1": -1, "2": 1}
    assert stored.prelabels_shown is False
    assert stored.prelabel_source == MachineSource.JUDGE


def test_the_holdout_is_fixed_per_chain_and_annotator_and_keyed():
    draws = [prelabel_held_out(project_id=7, chain_id=c, user_id=3, share=0.5) for c in range(400)]
    # Fixed: the same three ids always draw the same
    assert draws == [
        prelabel_held_out(project_id=7, chain_id=c, user_id=3, share=0.5) for c in range(400)
    ]
    # About the share (a binomial(400, 0.5) lies in 150..250 but for 1 in 10^23)
    assert 150 <= sum(draws) <= 250
    # Another annotator draws differently on the same chains
    other = [prelabel_held_out(project_id=7, chain_id=c, user_id=4, share=0.5) for c in range(400)]
    assert other != draws


def test_the_holdout_share_is_what_the_project_says(prelabeled, make_member, client_for):
    # Given: 40 chains with verdicts, a 25 % holdout, overlap 1
    prelabeled.prelabel_holdout = 0.25
    prelabeled.save()
    chains = ChainFactory.create_batch(40, project=prelabeled, step_count=1)
    for chain in chains:
        machine_labels(chain, [1])
    user = make_member(prelabeled)
    client = client_for(user)

    # When: the annotator labels all of them
    shown = {}
    for _ in chains:
        lease = lease_next(client, prelabeled)
        chain_pk = CHAIN_IDS.read(lease["chain"]["id"], viewer=user.pk)
        shown[chain_pk] = lease["chain"]["prelabel_source"] is not None
        assert submit(client, lease, [1]).status_code == 201

    # Then: exactly the chains the keyed draw holds out were served bare
    expected = {
        chain.pk: not prelabel_held_out(
            project_id=prelabeled.pk, chain_id=chain.pk, user_id=user.pk, share=0.25
        )
        for chain in chains
    }
    assert shown == expected
    assert 0 < list(shown.values()).count(False) < 40


def test_the_client_cannot_say_what_was_confirmed(prelabeled, make_member, client_for):
    chain = ChainFactory(project=prelabeled, step_count=1)
    machine_labels(chain, [1])
    client = client_for(make_member(prelabeled))
    lease = lease_next(client, prelabeled)
    step = lease["chain"]["steps"][0]["id"]

    # A rating that claims its own outcome is refused, naming the field
    body = {"ratings": [{"step": step, "rating": -1, "prelabel": "confirmed"}]}
    response = client.post(submit_url(lease), body, format="json")
    assert response.status_code == 400
    assert "prelabel" in str(response.json())
    assert StepRating.objects.count() == 0


def test_gold_chains_look_and_behave_like_any_other(prelabeled, make_member, client_for):
    # Given: a gold chain (every claim gold while one is left) and an ordinary chain,
    # both with judge verdicts
    prelabeled.gold_rate = 1.0
    prelabeled.save()
    gold = ChainFactory(project=prelabeled)
    annotation_with_ratings(chain=gold, labels=[1, -1, 1])
    gold_mark(project=prelabeled, chain_ids=[gold.pk])
    ordinary = ChainFactory(project=prelabeled)
    for chain in (gold, ordinary):
        machine_labels(chain, [1, 1, 1])
    user = make_member(prelabeled)
    client = client_for(user)

    # When: the annotator gets both, overriding step 3 on each
    first = lease_next(client, prelabeled)
    assert submit(client, first, [1, 1, -1]).status_code == 201
    second = lease_next(client, prelabeled)
    assert submit(client, second, [1, 1, -1]).status_code == 201

    # Then: the gold chain came first, the two answers have the same shape, show the
    # verdicts alike, and the same outcomes were recorded
    assert CHAIN_IDS.read(first["chain"]["id"], viewer=user.pk) == gold.pk
    assert CHAIN_IDS.read(second["chain"]["id"], viewer=user.pk) == ordinary.pk

    def without_ids(payload: dict) -> dict:
        chain = payload["chain"]
        return {
            "keys": sorted(chain),
            "steps": [(sorted(s), s["prelabel"]) for s in chain["steps"]],
            "source": chain["prelabel_source"],
            "assignment_keys": sorted(payload["assignment"]),
        }

    assert without_ids(first) == without_ids(second)
    assert outcomes(gold, user) == outcomes(ordinary, user)
    assert outcomes(gold, user)[2] == (PrelabelOutcome.OVERRIDDEN, MachineSource.JUDGE)


def test_gold_chains_are_held_out_by_the_same_draw(prelabeled, make_member, client_for):
    # Given: every chain held out, a gold chain with verdicts
    prelabeled.gold_rate = 1.0
    prelabeled.prelabel_holdout = 1.0
    prelabeled.save()
    gold = ChainFactory(project=prelabeled)
    annotation_with_ratings(chain=gold, labels=[1, 1, 1])
    gold_mark(project=prelabeled, chain_ids=[gold.pk])
    machine_labels(gold, [1, 1, 1])
    user = make_member(prelabeled)
    client = client_for(user)

    # Then: the gold lease is held out as an ordinary one would be, and stores the same
    lease = lease_next(client, prelabeled)
    assert CHAIN_IDS.read(lease["chain"]["id"], viewer=user.pk) == gold.pk
    assert lease["chain"]["prelabel_source"] is None
    stored = Assignment.objects.get(chain=gold, annotator__isnull=False, status="active")
    assert (stored.prelabel_source, stored.prelabels, stored.prelabels_shown) == (
        MachineSource.JUDGE,
        {"0": 1, "1": 1, "2": 1},
        False,
    )


def test_claim_costs_the_same_queries_with_pre_labels(
    prelabeled, make_member, client_for, django_assert_num_queries
):
    # The pre-labels ride in the lease's own statement: a new lease costs the 7 queries
    # it costs without them (tests/annotation/labeling/test_queue_api.py)
    for chain in ChainFactory.create_batch(3, project=prelabeled):
        machine_labels(chain, [1, -1, 1])
    client = client_for(make_member(prelabeled))
    with django_assert_num_queries(7):
        response = client.post(next_url(prelabeled))
    assert response.status_code == 200
    assert [s["prelabel"] for s in response.json()["chain"]["steps"]] == [1, -1, 1]


def test_submit_costs_the_same_queries_with_pre_labels(
    prelabeled, make_member, client_for, django_assert_num_queries
):
    # The outcomes are worked out from the lease the submit reads anyway and written in
    # its one statement: 6 queries, as without pre-labels (test_queue_api.py)
    chain = ChainFactory(project=prelabeled, step_count=12)
    machine_labels(chain, [1] * 6 + [-1] * 6)
    user = make_member(prelabeled)
    client = client_for(user)
    lease = lease_next(client, prelabeled)
    autostart._autostart_seen.clear()
    with django_assert_num_queries(6):
        assert submit(client, lease, [1] * 12).status_code == 201
    assert [o for o, _ in outcomes(chain, user)] == [PrelabelOutcome.CONFIRMED] * 6 + [
        PrelabelOutcome.OVERRIDDEN
    ] * 6


# --- the lead's settings --------------------------------------------------------------------


def settings_url(project) -> str:
    return f"/api/v1/projects/{project.pk}/"


def test_a_lead_sets_pre_labels(project, make_member, client_for):
    client = client_for(make_member(project, "lead"))
    body = {"prelabels": True, "prelabel_source": "monte_carlo", "prelabel_holdout": 0.2}
    response = client.patch(settings_url(project), body, format="json")
    assert response.status_code == 200, response.content
    got = response.json()
    assert (got["prelabels"], got["prelabel_source"], got["prelabel_holdout"]) == (
        True,
        "monte_carlo",
        0.2,
    )
    project.refresh_from_db()
    assert project.prelabels and project.prelabel_source == MachineSource.MONTE_CARLO


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"prelabel_source": "oracle"}, "prelabel_source"),
        ({"prelabel_holdout": 1.5}, "prelabel_holdout"),
        ({"prelabel_holdout": -0.1}, "prelabel_holdout"),
        ({"prelabels": "sometimes"}, "prelabels"),
    ],
)
def test_bad_pre_label_settings_are_refused(project, make_member, client_for, body, field):
    client = client_for(make_member(project, "lead"))
    response = client.patch(settings_url(project), body, format="json")
    assert response.status_code == 400
    assert field in response.json()
    project.refresh_from_db()
    assert project.prelabels is False and project.prelabel_holdout == pytest.approx(0.1)


@pytest.mark.parametrize("role", ["annotator", "ml"])
def test_only_leads_change_pre_label_settings(project, make_member, client_for, role):
    client = client_for(make_member(project, role))
    response = client.patch(settings_url(project), {"prelabels": True}, format="json")
    assert response.status_code == 403
    project.refresh_from_db()
    assert project.prelabels is False


def test_a_stranger_sees_no_pre_labels(prelabeled, make_member, client_for, django_user_model):
    # Someone who is not a member gets a 404 for the project's queue, verdicts or not
    chain = ChainFactory(project=prelabeled)
    machine_labels(chain, [1, 1, 1])
    stranger = django_user_model.objects.create_user(username="stranger", password="pw-1234x")
    response = client_for(stranger).post(next_url(prelabeled))
    assert response.status_code == 404
    assert not Assignment.objects.filter(chain=chain).exists()
