"""The counted submit's agreement (``queue.sql.CHAIN_AGREEMENT_SQL``, and on PostgreSQL
``CHAIN_COUNTED_AGREEMENT_SQL`` inside the submit's one statement) is the same definition
as ``quality.chain_agreement``'s ORM expression, which the bulk writers keep: on chains of
every shape (no pass, one, several, with corrections, imports beside them, ties and
unrated steps) the statement writes the ORM's value, and so does every submit."""

from __future__ import annotations

import random

import pytest
from django.db import connection

from annotation.labeling.queue.claim import lease_next
from annotation.labeling.queue.sql import CHAIN_AGREEMENT_SQL
from annotation.labeling.queue.submit import RatingInput, assignment_submit
from annotation.models import Chain, Step
from annotation.quality.chain_agreement import agreement_expression, chains_agreement_refresh
from tests.factories import ChainFactory, ProjectFactory, UserFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


def _random_chain(*, project, people, rng: random.Random) -> Chain:
    """A chain of 1-6 steps with 0-4 people's passes (a step left unrated now and then),
    each pass corrected once in a while, and an import's pass half the time.
    ``finished_count`` counts the current passes, as the queue keeps it."""
    steps = rng.randint(1, 6)
    chain = ChainFactory(project=project, step_count=steps)
    current = 0
    for person in rng.sample(people, rng.randint(0, 4)):
        labels = [rng.choice((-1, 0, 1, 1, None)) for _ in range(steps)]
        first = annotation_with_ratings(chain=chain, labels=labels, annotator=person)
        if rng.random() < 0.3:
            corrected = [rng.choice((-1, 0, 1)) for _ in range(steps)]
            annotation_with_ratings(
                chain=chain, labels=corrected, annotator=person, supersedes=first
            )
        current += 1
    if rng.random() < 0.5:
        annotation_with_ratings(chain=chain, labels=[-1] * steps)  # an import: never counted
    Chain.objects.filter(pk=chain.pk).update(finished_count=current)
    return chain


def test_the_submit_s_statement_writes_what_the_orm_definition_writes(project) -> None:
    # Given sixty chains of every shape
    rng = random.Random(7)
    people = [UserFactory() for _ in range(5)]
    chains = [_random_chain(project=project, people=people, rng=rng) for _ in range(60)]

    # When each chain's agreement is written by the submit's statement, then by the ORM's
    with connection.cursor() as cursor:
        for chain in chains:
            cursor.execute(CHAIN_AGREEMENT_SQL, {"chain": chain.pk})
            assert cursor.rowcount == 1
    by_statement = dict(Chain.objects.filter(project=project).values_list("pk", "agreement"))
    chains_agreement_refresh(chains=Chain.objects.filter(project=project))
    by_orm = dict(Chain.objects.filter(project=project).values_list("pk", "agreement"))

    # Then they agree on every chain, and the sample held nulls, full agreement and disputes
    assert by_statement.keys() == by_orm.keys()
    for pk, value in by_orm.items():
        assert by_statement[pk] == (None if value is None else pytest.approx(value)), pk
    values = list(by_orm.values())
    assert None in values and 1.0 in values
    assert any(v is not None and v < 1.0 for v in values)


def _orm_agreement(chain_id: int) -> float | None:
    return (
        Chain.objects.filter(pk=chain_id)
        .annotate(expected=agreement_expression())
        .values_list("expected", flat=True)
        .get()
    )


def test_a_counted_submit_writes_the_orm_s_agreement(make_member) -> None:
    # Given a project of overlap 3 whose four annotators rate every step at random
    project = ProjectFactory(overlap=3)
    people = [make_member(project) for _ in range(4)]
    ChainFactory.create_batch(6, project=project, step_count=4)
    rng = random.Random(11)
    submits = 0

    # When each takes chains and submits until nothing is left
    for _round in range(8):
        for person in people:
            lease = lease_next(project=project, user=person)
            if lease is None:
                continue
            steps = list(Step.objects.filter(chain_id=lease.assignment.chain_id))
            assignment_submit(
                assignment_id=lease.assignment.pk,
                user=person,
                ratings=[RatingInput(step_id=s.pk, rating=rng.choice((-1, 0, 1))) for s in steps],
            )
            submits += 1

            # Then after every submit the chain holds what the ORM's definition says
            chain = Chain.objects.get(pk=lease.assignment.chain_id)
            expected = _orm_agreement(chain.pk)
            assert chain.agreement == (None if expected is None else pytest.approx(expected))
    assert submits == 18
    assert Chain.objects.filter(project=project, agreement__lt=1.0).exists()
