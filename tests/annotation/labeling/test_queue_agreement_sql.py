"""The counted submit's agreement statement (``queue.sql.CHAIN_AGREEMENT_SQL``) is the same
definition as ``quality.chain_agreement``'s ORM expression, which the bulk writers keep:
on chains of every shape (no pass, one, several, with corrections, imports and a machine's
passes beside them, ties and unrated steps) the two write the same value."""

from __future__ import annotations

import random

import pytest
from django.db import connection

from annotation.labeling.queue.sql import CHAIN_AGREEMENT_SQL
from annotation.models import Chain
from annotation.quality.chain_agreement import chains_agreement_refresh
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings

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
    by_statement = {}
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
