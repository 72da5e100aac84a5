"""``Assignment.chain_open``: the claim's set of the annotator's closed leases on chains
still in the queue (annotation/labeling/queue/closed_leases.py). It must follow the chains as
they finish, reopen and turn gold, and the claim must read only it, not the history."""

from __future__ import annotations

import json
import re

import pytest
from django.db import connection, transaction
from django.utils import timezone
from psycopg.sql import Literal

from annotation.labeling.queue import leases
from annotation.labeling.queue import sql as queue_sql
from annotation.labeling.queue.leases import assignment_skip
from annotation.labeling.queue.prelabels import PrelabelPlan
from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.models import Assignment, AssignmentStatus, Chain
from annotation.projects.services import project_update
from annotation.quality.gold import gold_mark, gold_unmark
from tests.annotation.labeling.claiming import assignment_claim_next
from tests.factories import ChainFactory, ProblemFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


def claim_submit(project, user) -> Assignment:
    lease = assignment_claim_next(project=project, user=user)
    assert lease is not None
    steps = lease.chain.steps.order_by("index")
    assignment_submit(
        assignment_id=lease.pk,
        user=user,
        ratings=[RatingInput(step_id=s.pk, rating=1) for s in steps],
    )
    return lease


def submitted_by(user, chains: list[Chain]) -> None:
    """Closed leases of ``user`` on ``chains``, written directly, as the submits leave them."""
    now = timezone.now()
    Assignment.objects.bulk_create(
        Assignment(
            project_id=chain.project_id,
            chain=chain,
            annotator=user,
            status=AssignmentStatus.SUBMITTED,
            expires_at=now,
            finished_at=now,
            chain_open=not chain.is_finished,
        )
        for chain in chains
    )


def open_flags(chain: Chain) -> dict[int, bool]:
    return dict(
        Assignment.objects.filter(chain=chain)
        .exclude(status=AssignmentStatus.ACTIVE)
        .values_list("annotator_id", "chain_open")
    )


def test_a_submit_keeps_the_chain_open_until_the_last_annotation_shuts_it(project, make_member):
    # Given a project with overlap 2 and one chain
    project = project_update(project=project, data={"overlap": 2})
    chain = ChainFactory(project=project)
    first, second = make_member(project), make_member(project)

    # When the first annotator submits, the chain still waits for the second
    claim_submit(project, first)
    assert open_flags(chain) == {first.pk: True}

    # When the second submits, the chain is finished: no closed lease on it stays open
    claim_submit(project, second)
    chain.refresh_from_db()
    assert chain.is_finished
    assert open_flags(chain) == {first.pk: False, second.pk: False}


def test_a_skip_on_an_open_chain_stays_in_the_set_and_one_on_a_finished_chain_not(
    project, make_member
) -> None:
    project = project_update(project=project, data={"overlap": 1})
    chain = ChainFactory(project=project)
    skipper, late = make_member(project), make_member(project)
    lease = assignment_claim_next(project=project, user=skipper)
    assignment_skip(assignment_id=lease.pk, user=skipper, reason="unclear")
    assert open_flags(chain) == {skipper.pk: True}

    # A lease on a chain that finishes meanwhile (its own lease expired and went on)
    stale = assignment_claim_next(project=project, user=late)
    Assignment.objects.filter(pk=stale.pk).update(expires_at=timezone.now())
    claim_submit(project, make_member(project))
    assignment_skip(assignment_id=stale.pk, user=late, reason="gone")

    assert open_flags(chain)[late.pk] is False


def test_raising_the_overlap_reopens_the_set_and_lowering_it_shuts_it(project, make_member):
    project = project_update(project=project, data={"overlap": 1})
    chain = ChainFactory(project=project)
    user = make_member(project)
    claim_submit(project, user)
    assert open_flags(chain) == {user.pk: False}

    project = project_update(project=project, data={"overlap": 2})
    assert open_flags(chain) == {user.pk: True}

    project = project_update(project=project, data={"overlap": 1})
    assert open_flags(chain) == {user.pk: False}


def test_marking_gold_shuts_the_set_and_unmarking_reopens_it(project, make_member):
    project = project_update(project=project, data={"overlap": 3})
    chain = ChainFactory(project=project, step_count=2)
    user = make_member(project)
    claim_submit(project, user)
    annotation_with_ratings(chain=chain, labels=[1, 1])

    gold_mark(project=project, chain_ids=[chain.pk])
    assert open_flags(chain) == {user.pk: False}

    gold_unmark(project=project, chain_ids=[chain.pk])
    assert open_flags(chain) == {user.pk: True}


def _candidate_plan(project, user) -> dict:
    params = leases.sql_params(project=project, user=user, now=timezone.now())
    sql = queue_sql.CANDIDATE_SQL.format(skip="", lock="FOR NO KEY UPDATE OF c SKIP LOCKED")
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        (plan,) = cursor.fetchone()
    return plan[0]["Plan"] if isinstance(plan, list) else json.loads(plan)[0]["Plan"]


def _nodes(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from _nodes(child)


def test_the_claim_reads_the_open_chains_an_annotator_did_not_their_history(make_member):
    # Given an annotator with 2,000 closed leases on finished chains and 30 on open ones
    # that wait for others, in front of 100 chains they have not seen
    from tests.factories import ProjectFactory

    project = ProjectFactory(overlap=2)
    user = make_member(project)
    problem = ProblemFactory(project=project)
    finished, waiting, fresh = 2000, 30, 100
    chains = Chain.objects.bulk_create(
        Chain(
            project=project,
            problem=problem,
            content_hash=f"{i:064d}",
            priority=0,
            finished_count=2 if i < finished else (1 if i < finished + waiting else 0),
            is_finished=i < finished,
        )
        for i in range(finished + waiting + fresh)
    )
    submitted_by(user, chains[: finished + waiting])
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE annotation_chain")
        cursor.execute("ANALYZE annotation_assignment")

    # When PostgreSQL runs the claim's candidate query
    plan = _candidate_plan(project, user)

    # Then it reads the 30 open ones by the partial index, and picks the first fresh chain
    reads = [n for n in _nodes(plan) if n.get("Relation Name") == "annotation_assignment"]
    hashed = [n for n in reads if n.get("Index Name") == "assignment_done_open"]
    assert hashed, json.dumps(plan, indent=1)
    assert sum(n["Actual Rows"] * n["Actual Loops"] for n in hashed) == waiting
    assert plan["Actual Rows"] == 1


def _explained(sql: str, params: dict, *, plan_cache_mode: str | None = None) -> dict:
    """EXPLAIN ANALYZE of ``sql``, rolled back; with ``plan_cache_mode``, of the statement
    prepared as psycopg prepares it (``$n`` parameters), in that mode."""
    with transaction.atomic(), connection.cursor() as cursor:
        if plan_cache_mode is None:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        else:
            names: list[str] = []

            def numbered(match: re.Match) -> str:
                if match.group(1) not in names:
                    names.append(match.group(1))
                return f"${names.index(match.group(1)) + 1}"

            cursor.execute("PREPARE candidate AS " + re.sub(r"%\((\w+)\)s", numbered, sql))
            cursor.execute(f"SET LOCAL plan_cache_mode = {plan_cache_mode}")
            # EXECUTE takes no bound parameters: the values go in as literals.
            raw = connection.connection
            values = ", ".join(Literal(params[name]).as_string(raw) for name in names)
            cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE candidate({values})")
        (plan,) = cursor.fetchone()
        if plan_cache_mode is not None:
            cursor.execute("DEALLOCATE candidate")  # the session's, not rolled back
        transaction.set_rollback(True)  # the lease the INSERT took
    return (plan if isinstance(plan, list) else json.loads(plan))[0]["Plan"]


def _rows_read(plan: dict) -> int:
    """The most rows one node of ``plan`` read, over all its loops."""
    return max(n["Actual Rows"] * n["Actual Loops"] for n in _nodes(plan))


@pytest.mark.django_db(transaction=True)
def test_the_claim_reads_one_chain_at_a_time_not_the_annotators_history(make_member):
    # Given statistics taken while the annotator had done nothing (a new annotator, or a
    # fresh project), and then 12,000 finished chains they had submitted
    from tests.factories import ProjectFactory

    project = ProjectFactory(overlap=2)
    user = make_member(project)
    problem = ProblemFactory(project=project)
    chains = Chain.objects.bulk_create(
        Chain(
            project=project,
            problem=problem,
            content_hash=f"{i:064d}",
            finished_count=2 if i else 1,
            is_finished=bool(i),
        )
        for i in range(12_001)
    )
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE annotation_chain")
        cursor.execute("VACUUM ANALYZE annotation_assignment")
    submitted_by(user, chains[1:])
    now = timezone.now()
    params = leases.sql_params(project=project, user=user, now=now, chain=chains[0].pk)
    params["expires"] = params["now"]
    params.update(PrelabelPlan(source="judge", shown=True).sql_params())
    lease_statements = [
        queue_sql.lease_sql(vendor="postgresql", with_chain=False, prelabels=prelabels)
        for prelabels in (False, True)
    ]

    # When PostgreSQL checks the one open chain they have not done, and looks for it
    for sql in (*lease_statements, queue_sql.RECHECK_SQL, queue_sql.PLACE_SQL):
        plan = _explained(sql, params)

        # Then it reads that chain's rows, none of the annotator's 12,000
        assert _rows_read(plan) <= 2, json.dumps(plan, indent=1)
    candidate = queue_sql.CANDIDATE_SQL.format(skip="", lock="FOR NO KEY UPDATE OF c")
    for mode in (None, "force_custom_plan", "force_generic_plan"):
        plan = _explained(candidate, params, plan_cache_mode=mode)
        assert plan["Actual Rows"] == 1
        assert _rows_read(plan) <= 2, (mode, json.dumps(plan, indent=1))
