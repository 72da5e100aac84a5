"""Comparing two snapshot versions: chains added, removed, relabeled or moved to the other
split, counted in one statement and listed a page at a time in chain order."""

from __future__ import annotations

import pytest

from annotation.datasets.snapshot_diff import (
    SnapshotDiffCounts,
    snapshot_diff_counts,
    snapshot_diff_rows,
)
from annotation.datasets.snapshots import snapshot_create
from annotation.models import Snapshot, SnapshotChain
from tests.factories import ChainFactory, ProblemFactory, UserFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


def _snapshot(project, version, rows):
    """A snapshot with ``rows`` {chain: (split, labels)}, written directly."""
    snapshot = Snapshot.objects.create(project=project, version=version, content_hash=f"v{version}")
    SnapshotChain.objects.bulk_create(
        SnapshotChain(snapshot=snapshot, chain=chain, split=split, labels=labels)
        for chain, (split, labels) in rows.items()
    )
    return snapshot


@pytest.fixture
def versions(project):
    """A and B over seven chains: one of each change, and three left as they were."""
    problem = ProblemFactory(project=project, text="Problem with <b>markup</b> " + "x" * 300)
    chains = [ChainFactory(project=project, problem=problem) for _ in range(7)]
    kept, relabeled, moved, dropped, added = chains[0], chains[1], chains[2], chains[3], chains[4]
    a = _snapshot(
        project,
        1,
        {
            kept: ("train", [1, 1, 1]),
            relabeled: ("train", [1, 1, None]),
            moved: ("train", [1, -1, None]),
            dropped: ("heldout", [-1, None, None]),
            chains[5]: ("train", [1, 0, 1]),
            chains[6]: ("heldout", [1, 1, -1]),
        },
    )
    b = _snapshot(
        project,
        2,
        {
            kept: ("train", [1, 1, 1]),
            relabeled: ("heldout", [1, -1, 0]),
            moved: ("heldout", [1, -1, None]),
            added: ("train", [0, 1, 1]),
            chains[5]: ("train", [1, 0, 1]),
            chains[6]: ("heldout", [1, 1, -1]),
        },
    )
    return {"a": a, "b": b, "chains": chains, "problem": problem}


def test_counts_say_what_changed_from_a_to_b(versions, django_assert_num_queries):
    with django_assert_num_queries(1):
        counts = snapshot_diff_counts(a=versions["a"], b=versions["b"])

    assert counts == SnapshotDiffCounts(
        added=1, removed=1, labels_changed=1, split_changed=1, unchanged=3
    )
    # ...and the other way round, what was added is removed
    back = snapshot_diff_counts(a=versions["b"], b=versions["a"])
    assert (back.added, back.removed, back.labels_changed) == (1, 1, 1)
    same = snapshot_diff_counts(a=versions["a"], b=versions["a"])
    assert same == SnapshotDiffCounts(0, 0, 0, 0, 6)


def test_rows_list_every_change_in_chain_order(versions, django_assert_num_queries):
    chains = versions["chains"]

    with django_assert_num_queries(2):
        rows = snapshot_diff_rows(a=versions["a"], b=versions["b"])

    assert [(row.chain_id, row.change) for row in rows] == [
        (chains[1].pk, "labels_changed"),
        (chains[2].pk, "split_changed"),
        (chains[3].pk, "removed"),
        (chains[4].pk, "added"),
    ]
    relabeled, moved, removed, added = rows
    assert relabeled.labels_a == [1, 1, None] and relabeled.labels_b == [1, -1, 0]
    assert relabeled.changed_steps == [1, 2]
    assert (relabeled.split_a, relabeled.split_b) == ("train", "heldout")
    assert moved.changed_steps == [] and (moved.split_a, moved.split_b) == ("train", "heldout")
    assert removed.labels_b is None and removed.split_b is None
    assert removed.labels_a == [-1, None, None]
    assert added.labels_a is None and added.labels_b == [0, 1, 1]
    # The problem's start, as text
    assert added.problem == versions["problem"].text[:160]


def test_rows_page_by_chain_and_filter_by_change(versions):
    chains = versions["chains"]
    a, b = versions["a"], versions["b"]

    first = snapshot_diff_rows(a=a, b=b, limit=3)
    rest = snapshot_diff_rows(a=a, b=b, limit=3, after_chain=first[-1].chain_id)

    assert [row.chain_id for row in first + rest] == [c.pk for c in chains[1:5]]
    assert [row.chain_id for row in snapshot_diff_rows(a=a, b=b, change="added")] == [chains[4].pk]
    assert [row.change for row in snapshot_diff_rows(a=a, b=b, change="removed")] == ["removed"]
    assert [row.change for row in snapshot_diff_rows(a=a, b=b, change="split_changed")] == [
        "split_changed"
    ]
    with pytest.raises(ValueError):
        snapshot_diff_rows(a=a, b=b, change="everything")


def test_diff_of_two_snapshots_taken_with_different_options(project):
    # Given: one finished chain, one a second annotator relabels, one unfinished
    steady = ChainFactory(project=project, step_count=2, finished_count=1, is_finished=True)
    annotation_with_ratings(chain=steady, annotator=UserFactory(), labels=[1, 1])
    changing = ChainFactory(project=project, step_count=2, finished_count=1, is_finished=True)
    annotation_with_ratings(chain=changing, annotator=UserFactory(), labels=[1, 1])
    partial = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=partial, annotator=UserFactory(), labels=[1, -1])
    a = snapshot_create(project=project, finished_only=False, heldout_fraction=0.0)

    # When: the relabeled chain ties on step 2, and B keeps finished chains and drops ties
    annotation_with_ratings(chain=changing, annotator=UserFactory(), labels=[1, -1])
    b = snapshot_create(project=project, heldout_fraction=0.0)

    # Then
    counts = snapshot_diff_counts(a=a, b=b)
    assert (counts.added, counts.removed, counts.labels_changed, counts.unchanged) == (0, 1, 1, 1)
    rows = {row.chain_id: row for row in snapshot_diff_rows(a=a, b=b)}
    assert rows[partial.pk].change == "removed"
    assert rows[changing.pk].labels_b == [1, None]
    assert rows[changing.pk].changed_steps == [1]
