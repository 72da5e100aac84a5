"""The fast export read path: ``snapshot_examples_streamed`` (one query over a server-side
cursor on PostgreSQL) must give exactly what the portable keyset path gives, so every
export format writes the same bytes whichever path read the snapshot."""
from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from django.db import connection

from annotation import dataset_selectors
from annotation.dataset_selectors import snapshot_examples, snapshot_examples_streamed
from annotation.services import exports
from annotation.services.exports import TEXT_FORMATS, export_bytes, export_write
from annotation.services.imports import chain_import
from annotation.services.snapshots import snapshot_create
from tests.factories import ProjectFactory

pytestmark = pytest.mark.django_db

LABELS = [
    [1, 1, 1],
    [1, -1, None, None],
    [1, 0, 1],
    [0, 1, -1],
    [None, None],
    [-1, None, None],
    [1, 1, 0, 1, 1],
]


@pytest.fixture
def snapshot(tmp_path: Path):
    """A snapshot of 7 chains with imported labels, both splits, and text that JSON and
    CSV must escape (quotes, backslashes, newlines, tabs, U+2028, non-ASCII)."""
    source = tmp_path / "chains.jsonl"
    with source.open("w", encoding="utf-8") as out:
        for index, labels in enumerate(LABELS):
            record = {
                "problem": f'Problem {index}: "quoted" \\ back\tslash ünï\u2028code × 1?',
                "steps": [
                    f"Chain {index} step {s}: $x_{s}$,\n<b>ok</b>, 😀" for s in range(len(labels))
                ],
                "answer": str(index),
                "reference_answer": str(index if index % 2 else index + 1),
                "labels": labels,
            }
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    project = ProjectFactory()
    chain_import(project=project, path=source, fmt="generic")
    return snapshot_create(project=project, heldout_fraction=0.4)


def _fallback(**kwargs):
    # The portable path, in pages of 2 so paging is exercised too.
    kwargs.pop("fetch_rows", None)
    return snapshot_examples(chunk_size=2, **kwargs)


@pytest.mark.parametrize("with_votes", [False, True])
@pytest.mark.parametrize("split", [None, "train", "heldout"])
def test_streamed_examples_equal_keyset_examples(snapshot, split, with_votes):
    # Given a snapshot with chains in both splits
    assert connection.vendor == "postgresql"

    # When read by both paths, the streamed one two rows per FETCH
    fast = list(
        snapshot_examples_streamed(
            snapshot=snapshot, split=split, with_votes=with_votes, fetch_rows=2
        )
    )
    slow = list(snapshot_examples(snapshot=snapshot, split=split, with_votes=with_votes))

    # Then they are the same examples in the same order
    assert fast == slow
    assert fast, "the split must not be empty, or the comparison proves nothing"
    if with_votes:
        assert all(example.votes for example in fast if any(
            label is not None for label in example.labels
        ))
    else:
        assert all(example.votes == [] for example in fast)


@pytest.mark.parametrize("fmt", TEXT_FORMATS)
@pytest.mark.parametrize("split", [None, "heldout"])
def test_postgresql_path_and_fallback_write_identical_exports(
    snapshot, monkeypatch, fmt, split
):
    # Given the export of the snapshot through the PostgreSQL server-side cursor
    fast = b"".join(
        export_bytes(snapshot=snapshot, fmt=fmt, ambiguous="negative", split=split)
    )

    # When the same export reads through the portable keyset fallback
    monkeypatch.setattr(exports, "snapshot_examples_streamed", _fallback)
    slow = b"".join(
        export_bytes(snapshot=snapshot, fmt=fmt, ambiguous="negative", split=split)
    )

    # Then the bytes are identical
    assert fast == slow
    assert fast.strip(), "an empty export would make the comparison vacuous"


def test_postgresql_path_and_fallback_write_identical_parquet(snapshot, monkeypatch, tmp_path):
    # Given a Parquet export read through the server-side cursor
    export_write(snapshot=snapshot, fmt="parquet", path=tmp_path / "fast.parquet",
                 ambiguous="positive")

    # When the same export reads through the fallback
    monkeypatch.setattr(exports, "snapshot_examples_streamed", _fallback)
    export_write(snapshot=snapshot, fmt="parquet", path=tmp_path / "slow.parquet",
                 ambiguous="positive")

    # Then both files hold the same rows and metadata
    fast, slow = pq.read_table(tmp_path / "fast.parquet"), pq.read_table(tmp_path / "slow.parquet")
    assert fast.num_rows > 0
    assert fast.equals(slow)
    assert fast.schema.metadata == slow.schema.metadata


def test_text_export_is_the_utf8_of_the_bytes_export(snapshot):
    # Given the bytes export; when the same export is asked for as text
    raw = b"".join(export_bytes(snapshot=snapshot, fmt="prm800k", ambiguous="positive"))
    text = "".join(
        exports.export_text(snapshot=snapshot, fmt="prm800k", ambiguous="positive")
    )

    # Then the text is those bytes decoded, one JSON object a line (split on "\n" only:
    # U+2028 in the text stays raw, as JSON allows, and is no line break here)
    assert text == raw.decode("utf-8")
    lines = text.removesuffix("\n").split("\n")
    assert len(lines) == snapshot.chains.count()
    problem = json.loads(lines[0])["question"]["problem"]
    assert problem.endswith(' "quoted" \\ back\tslash ünï\u2028code × 1?')


def test_closing_the_stream_early_leaves_the_connection_usable(snapshot):
    # Given a stream read one row at a time, abandoned after its first example
    before = connection.in_atomic_block
    stream = snapshot_examples_streamed(snapshot=snapshot, fetch_rows=1)
    first = next(stream)

    # When it is closed (a client that disconnects mid-download)
    stream.close()

    # Then its transaction is closed and the connection answers the next query
    assert first.chain_id > 0
    assert connection.in_atomic_block == before
    assert len(list(snapshot_examples_streamed(snapshot=snapshot))) == snapshot.chains.count()


def test_other_databases_use_the_keyset_path(snapshot, monkeypatch):
    # Given a database that is not PostgreSQL (SQLite, the demo default)
    calls = []

    def spy(**kwargs):
        calls.append(kwargs)
        return snapshot_examples(**kwargs)

    monkeypatch.setattr(connection, "vendor", "sqlite")
    monkeypatch.setattr(dataset_selectors, "snapshot_examples", spy)

    # When the streamed selector is asked
    examples = list(snapshot_examples_streamed(snapshot=snapshot, split="train"))

    # Then it hands over to the keyset path with the same options
    assert calls == [{"snapshot": snapshot, "split": "train", "with_votes": False}]
    assert [e.split for e in examples] == ["train"] * len(examples)
