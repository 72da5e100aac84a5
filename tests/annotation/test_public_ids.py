"""Public ids (annotation/public_ids.py): a keyed permutation of row ids per kind."""

from __future__ import annotations

import random

import pytest

from annotation.public_ids import (
    ASSIGNMENT_IDS,
    CHAIN_IDS,
    PUBLIC_ID_MAX,
    STEP_IDS,
    PublicIds,
)


def test_every_row_id_has_one_public_id_that_reads_back() -> None:
    rng = random.Random(7)
    row_ids = [1, 2, 3, PUBLIC_ID_MAX - 1, PUBLIC_ID_MAX] + [
        rng.randint(1, PUBLIC_ID_MAX) for _ in range(2000)
    ]
    for ids in (CHAIN_IDS, ASSIGNMENT_IDS):
        shown = [ids.show(pk) for pk in row_ids]
        assert all(1 <= public <= PUBLIC_ID_MAX for public in shown)
        assert len(set(shown)) == len(set(row_ids))
        assert [ids.read(public) for public in shown] == row_ids


def test_a_step_s_public_id_is_its_chain_s_permutation_and_its_index() -> None:
    rng = random.Random(8)
    chains = [1, 2, 2**36] + [rng.randint(1, 2**36) for _ in range(500)]
    shown = {(pk, index): STEP_IDS.show(pk, index) for pk in chains for index in (0, 1, 149)}
    assert len(set(shown.values())) == len(shown)
    assert all(1 <= public <= PUBLIC_ID_MAX for public in shown.values())
    assert all(STEP_IDS.read(public) == key for key, public in shown.items())
    assert all(STEP_IDS.show(pk, 5) == STEP_IDS.base(pk) + 5 for pk in chains)


def test_numbers_out_of_range_are_no_public_id_and_rows_past_it_have_none() -> None:
    assert STEP_IDS.read(0) is None and STEP_IDS.read(PUBLIC_ID_MAX + 1) is None
    assert CHAIN_IDS.read(0) is None and CHAIN_IDS.read(PUBLIC_ID_MAX + 1) is None
    with pytest.raises(ValueError):
        CHAIN_IDS.show(PUBLIC_ID_MAX + 1)
    with pytest.raises(ValueError):
        STEP_IDS.show(2**36 + 1, 0)
    with pytest.raises(ValueError):
        STEP_IDS.show(1, 2**16)
    assert 2**53 > PUBLIC_ID_MAX  # a JavaScript number holds every public id exactly


def test_consecutive_rows_get_unrelated_public_ids_per_kind_and_per_secret(settings) -> None:
    # Given: the first hundred rows of each kind
    rows = range(1, 101)
    chains = [CHAIN_IDS.show(pk) for pk in rows]
    steps = [STEP_IDS.show(pk, 0) for pk in rows]
    # Then: their public ids (a chain's, its first step's) neither follow the row order
    # nor each other's kind
    assert chains != sorted(chains) and chains != sorted(chains, reverse=True)
    rises = sum(b > a for a, b in zip(chains, chains[1:], strict=False))
    assert 30 < rises < 70
    assert not set(chains) & set(steps)
    # And: another secret gives other public ids
    settings.SECRET_KEY = "another-secret"
    assert [PublicIds("chain").show(pk) for pk in rows] != chains
