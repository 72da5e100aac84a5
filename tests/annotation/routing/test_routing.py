"""Routing (issue 23, item 7): chains the lead's machine sources agree on leave the queue
(a keyed share stays as spot checks), chains they disagree on go to people first, a
source under the kappa threshold routes nothing, and a label the PRM contradicts gets a
second look by another annotator. On PostgreSQL, through the real queue."""

from __future__ import annotations

import pytest

from annotation.chains.services import chain_requeue
from annotation.models import (
    Chain,
    ChainEvent,
    ChainEventKind,
    ChainRouting,
)
from annotation.routing.selectors import routing_summary
from annotation.routing.services import chains_route, chains_second_look, spot_checked
from tests.annotation.labeling.claiming import assignment_claim_next
from tests.annotation.routing.routing_lab import (
    JUDGE,
    MC,
    both_sources,
    routing_chains,
    trusted_sources,
    with_rules,
)
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings, machine_labels

pytestmark = pytest.mark.django_db


def _routing(chain: Chain) -> tuple[str, bool, int | None]:
    chain.refresh_from_db()
    return chain.routing, chain.people_first, chain.routing_first_error


def test_agreed_chains_leave_the_queue_and_disagreements_come_first(project):
    # Given: trusted sources, one chain they agree on, one they disagree on, one
    # plain chain with no machine verdict, and the plain one prioritised highest
    project = with_rules(project)
    agreed, disputed, plain = routing_chains(project).values()
    Chain.objects.filter(pk=plain.pk).update(priority=10.0)

    # When
    outcome = chains_route(project=project)

    # Then: agreed is out of the queue with the first error they agreed on, the
    # disagreement goes to people before the higher-priority plain chain
    assert _routing(agreed) == (ChainRouting.AGREED, False, 1)
    assert _routing(disputed) == (ChainRouting.DISAGREED, True, None)
    assert _routing(plain) == (ChainRouting.NONE, False, None)
    assert (outcome.routed[ChainRouting.AGREED], outcome.routed[ChainRouting.DISAGREED]) == (1, 1)
    annotator = UserFactory()
    first = assignment_claim_next(project=project, user=annotator)
    assert first is not None and first.chain_id == disputed.pk
    second = assignment_claim_next(project=project, user=UserFactory())
    assert second is not None and second.chain_id == plain.pk  # then by priority
    claimed = {
        lease.chain_id
        for user in [UserFactory() for _ in range(4)]
        if (lease := assignment_claim_next(project=project, user=user)) is not None
    }
    assert agreed.pk not in claimed
    # And each change is in the chain's history
    event = ChainEvent.objects.get(chain=agreed, kind=ChainEventKind.ROUTED)
    assert event.detail == {"routing": "agreed", "first_error": 1, "sources": [1, 1]}


def test_a_second_pass_changes_nothing_and_a_new_disagreement_sends_a_chain_back(project):
    project = with_rules(project)
    trusted_sources(project)
    chain = ChainFactory(project=project, step_count=2)
    both_sources(chain, [1, 1], [1, 1])
    assert chains_route(project=project).changed == 1
    assert chains_route(project=project).changed == 0

    # A newer judge run calls the first step wrong: the chain is back with people, first
    machine_labels(chain=chain, ratings=[-1, None], source=JUDGE, run_kind="judge", run_id=2)
    chains_route(project=project)

    assert _routing(chain) == (ChainRouting.DISAGREED, True, None)


def test_a_search_that_only_bounded_the_error_is_no_verdict(project):
    # Given trusted sources; on a 3-step chain the judge names step 2 and a rollout
    # search stopped after its -1 probe at step 2 with steps 0 and 1 unprobed: the error
    # is somewhere in 0..2, so the sources agree on nothing yet
    project = with_rules(project)
    trusted_sources(project)
    chain = ChainFactory(project=project, step_count=3)
    both_sources(chain, [None, None, -1], [1, 1, -1])

    chains_route(project=project)

    # Then the chain stays with people, as with any chain one source has no verdict on
    assert _routing(chain) == (ChainRouting.NONE, False, None)

    # Once a probe at step 1 finds it right, the search has found step 2: agreed
    machine_labels(chain=chain, ratings=[None, 1, -1], source=MC, run_id=2)
    chains_route(project=project)
    assert _routing(chain) == (ChainRouting.AGREED, False, 2)


def test_without_opting_in_or_with_one_source_nothing_is_accepted(project):
    project = with_rules(project, routing_accept=False)
    trusted_sources(project)
    chain = ChainFactory(project=project, step_count=2)
    both_sources(chain, [1, 1], [1, 1])
    chains_route(project=project)
    assert _routing(chain) == (ChainRouting.NONE, False, None)

    project = with_rules(project, routing_sources=[MC])
    chains_route(project=project)
    assert _routing(chain) == (ChainRouting.NONE, False, None)


def test_a_source_below_the_kappa_threshold_or_unmeasured_routes_nothing(project):
    # Given: no person labeled anything, so neither source has a kappa
    project = with_rules(project)
    chain = ChainFactory(project=project, step_count=2)
    both_sources(chain, [1, 1], [-1, None])

    outcome = chains_route(project=project)

    assert _routing(chain) == (ChainRouting.NONE, False, None)
    assert [s.usable for s in outcome.sources] == [False, False]
    assert "no steps in common" in outcome.sources[0].reason

    # And once measured, a threshold above their kappa still keeps them out
    trusted_sources(project)
    project = with_rules(project, routing_min_kappa=1.0)
    assert chains_route(project=project).routed[ChainRouting.DISAGREED] == 1
    project = with_rules(project, routing_min_kappa=0.99)
    Chain.objects.filter(pk=chain.pk).update(routing="", people_first=False)
    machine_labels(  # the judge now errs on a trusted chain: kappa falls below 0.99
        chain=Chain.objects.filter(project=project, is_finished=True).first(),
        ratings=[-1, None],
        source=JUDGE,
        run_kind="judge",
        run_id=3,
    )
    outcome = chains_route(project=project)
    assert [s.usable for s in outcome.sources] == [True, False]
    assert "below the threshold" in outcome.sources[1].reason
    assert _routing(chain) == (ChainRouting.NONE, False, None)


def test_routing_leaves_chains_people_started_on(project):
    project = with_rules(project)
    trusted_sources(project)
    started, leased = (ChainFactory(project=project, step_count=2) for _ in range(2))
    for chain in (started, leased):
        both_sources(chain, [1, 1], [1, 1])
    annotation_with_ratings(chain=started, labels=[1, 1], annotator=UserFactory())
    Chain.objects.exclude(pk=leased.pk).filter(project=project).update(priority=-1.0)
    lease = assignment_claim_next(project=project, user=UserFactory())
    assert lease is not None and lease.chain_id == leased.pk

    chains_route(project=project)

    assert _routing(started) == (ChainRouting.NONE, False, None)
    assert _routing(leased) == (ChainRouting.NONE, False, None)


def test_a_keyed_share_of_agreed_chains_is_spot_checked_and_measured(project):
    # Given: 40 agreed chains, half of them spot-checked
    project = with_rules(project, routing_spot_check=0.5)
    trusted_sources(project)
    chains = [ChainFactory(project=project, step_count=2) for _ in range(40)]
    for chain in chains:
        both_sources(chain, [1, -1], [1, -1])

    chains_route(project=project)

    checks = [c for c in chains if spot_checked(project_id=project.pk, chain_id=c.pk, share=0.5)]
    assert 5 < len(checks) < 35
    for chain in chains:
        expected = ChainRouting.SPOT_CHECK if chain in checks else ChainRouting.AGREED
        assert _routing(chain)[0] == expected
    # When: people label two spot checks, agreeing with the machines on one
    for chain, labels in zip(checks[:2], ([1, -1], [-1, None]), strict=True):
        annotation_with_ratings(chain=chain, labels=labels, annotator=UserFactory())
        Chain.objects.filter(pk=chain.pk).update(is_finished=True, finished_count=1)

    summary = routing_summary(project=project)

    # Then: one of two checked is wrong, with its interval; the rest still wait
    assert (summary.spot_check_errors.hits, summary.spot_check_errors.total) == (1, 2)
    assert summary.spot_check_errors.low < 0.5 < summary.spot_check_errors.high
    assert summary.spot_checks_waiting == len(checks) - 2
    assert summary.chains[ChainRouting.AGREED] == 40 - len(checks)


def test_a_contradicted_label_gets_a_second_look_by_someone_else(project):
    # Given: a finished chain one person labeled
    author = UserFactory()
    chain = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=chain, labels=[1, 1], annotator=author)
    Chain.objects.filter(pk=chain.pk).update(is_finished=True, finished_count=1)
    ChainFactory(project=project, step_count=2, priority=5.0)

    # When: the PRM is sure the second step is wrong
    contradiction = {"step": 1, "rating": 1, "value": 0.02}
    changed = chains_second_look(project=project, contradictions={chain.pk: contradiction})

    # Then: one more pass is asked for, first in the queue, never from the author
    assert changed == [chain.pk]
    chain.refresh_from_db()
    assert (chain.routing, chain.people_first, chain.is_finished) == ("second_look", True, False)
    assert assignment_claim_next(project=project, user=author).chain_id != chain.pk
    lease = assignment_claim_next(project=project, user=UserFactory())
    assert lease is not None and lease.chain_id == chain.pk
    event = ChainEvent.objects.get(chain=chain, kind=ChainEventKind.SECOND_LOOK)
    assert event.detail == contradiction
    # And a second contradiction on it asks for nothing more
    assert chains_second_look(project=project, contradictions={chain.pk: contradiction}) == []


def test_a_lead_who_requeues_an_agreed_chain_gets_it_back_from_people(project):
    project = with_rules(project)
    trusted_sources(project)
    chain = ChainFactory(project=project, step_count=2)
    both_sources(chain, [1, 1], [1, 1])
    chains_route(project=project)
    assert _routing(chain)[0] == ChainRouting.AGREED

    chain_requeue(chain=chain, actor=UserFactory())
    chains_route(project=project)

    assert _routing(chain)[0] == ChainRouting.NONE
    lease = assignment_claim_next(project=project, user=UserFactory())
    assert lease is not None and lease.chain_id == chain.pk
