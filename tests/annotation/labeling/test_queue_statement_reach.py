"""What the queue's statements read: a next and a submit read their own chain's
passes and ratings, never every pass in the database, whatever PostgreSQL's statistics
say. A statement count cannot see this (the statement is the same one, only its plan reads
more), so each statement runs under EXPLAIN ANALYZE too and its plan's rows are counted."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection

from annotation.labeling.queue.claim import lease_next
from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.models import Annotation, AnnotationSource, Chain, Step, StepRating
from tests.factories import ChainFactory, ProblemFactory, ProjectFactory

pytestmark = pytest.mark.django_db

PASS_TABLES = (Annotation._meta.db_table, StepRating._meta.db_table)


def _rows_touched(node: dict, tables: tuple[str, ...]) -> int:
    """Rows the plan's scans of ``tables`` returned or threw away, over all their loops."""
    touched = 0
    if "Scan" in node["Node Type"] and node.get("Relation Name") in tables:
        rows = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        touched += rows * node["Actual Loops"]
    for child in node.get("Plans", ()):
        touched += _rows_touched(child, tables)
    return touched


@contextmanager
def pass_rows_read() -> Iterator[dict[str, int]]:
    """Every statement run inside the block, with the rows of passes and ratings it reads:
    each runs first under EXPLAIN ANALYZE in a savepoint rolled back (so a write is
    measured on the rows it will meet and changes nothing), then for real."""
    read: dict[str, int] = {}

    def measure(execute: Callable, sql: str, params: Any, many: bool, context: dict) -> Any:
        if not many and not sql.lstrip().upper().startswith(("SAVEPOINT", "RELEASE", "ROLLBACK")):
            raw = context["cursor"].cursor  # the driver's cursor: no wrapper runs again
            raw.execute("SAVEPOINT reach")
            raw.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
            (plan,) = raw.fetchone()
            raw.execute("ROLLBACK TO SAVEPOINT reach")
            raw.execute("RELEASE SAVEPOINT reach")
            plan = json.loads(plan) if isinstance(plan, str) else plan
            read[" ".join(sql.split())] = _rows_touched(plan[0]["Plan"], PASS_TABLES)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(measure):
        yield read


def _finished_chains_with_passes(*, project, annotators, chains: int, steps: int) -> None:
    """``chains`` finished chains of ``steps`` steps, each with a human pass of every one of
    ``annotators`` rating each step: the project's past work, written in bulk."""
    problem = ProblemFactory(project=project)
    done = Chain.objects.bulk_create(
        Chain(
            project=project,
            problem=problem,
            content_hash=f"done-{i:059d}",
            step_count=steps,
            finished_count=len(annotators),
            is_finished=True,
        )
        for i in range(chains)
    )
    rows = Step.objects.bulk_create(
        Step(chain=chain, index=i, text=f"step {i}") for chain in done for i in range(steps)
    )
    passes = Annotation.objects.bulk_create(
        Annotation(chain=chain, source=AnnotationSource.HUMAN, annotator=user)
        for chain in done
        for user in annotators
    )
    steps_of = {chain.pk: [s for s in rows if s.chain_id == chain.pk] for chain in done}
    StepRating.objects.bulk_create(
        StepRating(annotation=a, step=s, rating=1 if s.index % 2 else -1)
        for a in passes
        for s in steps_of[a.chain_id]
    )


def _dead_rows_removed(tables: tuple[str, ...]) -> None:
    """VACUUM ``tables`` from a connection of its own (VACUUM runs outside a transaction,
    and the test's is open): the rows earlier tests of this process wrote and rolled back
    go, so the ANALYZE below sees the tables empty, as a fresh deployment's are, not
    holding pages of dead rows, under which PostgreSQL plans differently."""
    import psycopg

    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as other:
        for table in tables:
            other.execute(f"VACUUM {table}")


def test_a_counted_second_pass_reads_its_own_chain_only(
    make_member, django_capture_on_commit_callbacks
) -> None:
    # Given a project of overlap 2 whose pass tables were analyzed while still empty, as a
    # new project's are until autovacuum's next ANALYZE (the queue bench's database, any
    # fresh deployment), and then a thousand chains' passes by its two annotators
    project = ProjectFactory(overlap=2)
    first, second = make_member(project), make_member(project)
    _dead_rows_removed(PASS_TABLES)
    with connection.cursor() as cursor:
        for table in PASS_TABLES:
            cursor.execute(f"ANALYZE {table}")
    _finished_chains_with_passes(project=project, annotators=[first, second], chains=1000, steps=1)
    chain = ChainFactory(project=project, step_count=5)
    steps = list(chain.steps.order_by("index"))
    lease = lease_next(project=project, user=first)
    assert lease is not None and lease.assignment.chain_id == chain.pk
    assignment_submit(
        assignment_id=lease.assignment.pk,
        user=first,
        ratings=[RatingInput(step_id=s.pk, rating=1) for s in steps],
    )

    # When the second annotator takes the chain and submits the pass that counts second
    # (the chain's agreement is worked out again, the statement that once read every pass), and
    # what each runs once committed
    with pass_rows_read() as read, django_capture_on_commit_callbacks(execute=True):
        lease = lease_next(project=project, user=second)
        assert lease is not None
        assignment_submit(
            assignment_id=lease.assignment.pk,
            user=second,
            ratings=[RatingInput(step_id=s.pk, rating=-1 if s.index else 1) for s in steps],
        )
    chain.refresh_from_db()
    assert (chain.finished_count, chain.agreement) == (2, pytest.approx(0.2))

    # Then no statement of theirs reads more than a few times the chain's own passes and
    # ratings (2 and 10; the project holds 2,000 of each more)
    assert len(read) >= 5, read  # the claim's and the submit's statements, writes too
    too_many = {sql: rows for sql, rows in read.items() if rows > 60}
    assert not too_many, too_many
