"""Public ids (annotation/public_ids.py): a keyed permutation of row ids per kind, and for
chains and steps per viewer (the annotator who reads them)."""

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

# The user ids of two annotators who read public ids.
VIEWER, OTHER_VIEWER = 5, 6


def test_every_row_id_has_one_public_id_that_reads_back() -> None:
    rng = random.Random(7)
    row_ids = [1, 2, 3, PUBLIC_ID_MAX - 1, PUBLIC_ID_MAX] + [
        rng.randint(1, PUBLIC_ID_MAX) for _ in range(2000)
    ]
    for ids, viewer in ((CHAIN_IDS, VIEWER), (CHAIN_IDS, None), (ASSIGNMENT_IDS, None)):
        shown = [ids.show(pk, viewer=viewer) for pk in row_ids]
        assert all(1 <= public <= PUBLIC_ID_MAX for public in shown)
        assert len(set(shown)) == len(set(row_ids))
        assert [ids.read(public, viewer=viewer) for public in shown] == row_ids


def test_a_step_s_public_id_is_its_chain_s_permutation_and_its_index() -> None:
    rng = random.Random(8)
    chains = [1, 2, 2**36] + [rng.randint(1, 2**36) for _ in range(500)]
    shown = {
        (pk, index): STEP_IDS.show(pk, index, viewer=VIEWER)
        for pk in chains
        for index in (0, 1, 149)
    }
    assert len(set(shown.values())) == len(shown)
    assert all(1 <= public <= PUBLIC_ID_MAX for public in shown.values())
    assert all(STEP_IDS.read(public, viewer=VIEWER) == key for key, public in shown.items())
    assert all(
        STEP_IDS.show(pk, 5, viewer=VIEWER) == STEP_IDS.base(pk, viewer=VIEWER) + 5 for pk in chains
    )


def test_numbers_out_of_range_are_no_public_id_and_rows_past_it_have_none() -> None:
    for viewer in (VIEWER, None):
        assert STEP_IDS.read(0, viewer=viewer) is None
        assert STEP_IDS.read(PUBLIC_ID_MAX + 1, viewer=viewer) is None
        assert CHAIN_IDS.read(0, viewer=viewer) is None
        assert CHAIN_IDS.read(PUBLIC_ID_MAX + 1, viewer=viewer) is None
        with pytest.raises(ValueError):
            CHAIN_IDS.show(PUBLIC_ID_MAX + 1, viewer=viewer)
        with pytest.raises(ValueError):
            STEP_IDS.show(2**36 + 1, 0, viewer=viewer)
        with pytest.raises(ValueError):
            STEP_IDS.show(1, 2**16, viewer=viewer)
    assert 2**53 > PUBLIC_ID_MAX  # a JavaScript number holds every public id exactly


def test_consecutive_rows_get_unrelated_public_ids_per_kind_and_per_secret(settings) -> None:
    # Given: the first hundred rows of each kind
    rows = range(1, 101)
    chains = [CHAIN_IDS.show(pk, viewer=VIEWER) for pk in rows]
    steps = [STEP_IDS.show(pk, 0, viewer=VIEWER) for pk in rows]
    # Then: their public ids (a chain's, its first step's) neither follow the row order
    # nor each other's kind
    assert chains != sorted(chains) and chains != sorted(chains, reverse=True)
    rises = sum(b > a for a, b in zip(chains, chains[1:], strict=False))
    assert 30 < rises < 70
    assert not set(chains) & set(steps)
    # And: another secret gives other public ids
    settings.SECRET_KEY = "another-secret"
    assert [PublicIds("chain").show(pk, viewer=VIEWER) for pk in rows] != chains


def test_chain_and_step_ids_are_each_viewer_s_own_and_the_lab_s_are_none_of_theirs() -> None:
    # Given: a sample of chain rows, read by two annotators and by the lab (no viewer)
    rng = random.Random(9)
    rows = [1, 2, 3] + [rng.randint(1, 2**36) for _ in range(300)]
    viewers = (VIEWER, OTHER_VIEWER, None)
    chains = {v: [CHAIN_IDS.show(pk, viewer=v) for pk in rows] for v in viewers}
    steps = {v: [STEP_IDS.show(pk, 3, viewer=v) for pk in rows] for v in viewers}
    for ids in (chains, steps):
        # Then: the same row has a different public id for each of them
        for a, b in ((VIEWER, OTHER_VIEWER), (VIEWER, None), (OTHER_VIEWER, None)):
            assert all(x != y for x, y in zip(ids[a], ids[b], strict=True))
        # And: the ids one of them read tell little of the rows' ids for another
        assert len(set(ids[VIEWER]) & set(ids[OTHER_VIEWER])) <= 1
    # And: each reads their own ids back, but an id read with another viewer (another
    # annotator's, or the lab's) does not give the row back
    for v in viewers:
        assert [CHAIN_IDS.read(p, viewer=v) for p in chains[v]] == rows
        assert [STEP_IDS.read(p, viewer=v) for p in steps[v]] == [(pk, 3) for pk in rows]
        for other in viewers:
            if other == v:
                continue
            assert all(
                CHAIN_IDS.read(p, viewer=other) != pk for p, pk in zip(chains[v], rows, strict=True)
            )
            assert all(
                STEP_IDS.read(p, viewer=other) != (pk, 3)
                for p, pk in zip(steps[v], rows, strict=True)
            )
    # And: an assignment's id is one for everyone (no viewer)
    assert ASSIGNMENT_IDS.read(ASSIGNMENT_IDS.show(42, viewer=None), viewer=None) == 42
