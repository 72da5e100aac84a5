"""The fast export read path: ``snapshot_examples_streamed`` (one COPY of one query on
PostgreSQL) must give exactly what the portable keyset path gives, so every
export format writes the same bytes whichever path read the snapshot."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import psycopg
import pyarrow.parquet as pq
import pytest
from django.db import connection

from annotation.datasets import exports
from annotation.datasets import snapshot_reads as dataset_selectors
from annotation.datasets.exporters import csv_lines
from annotation.datasets.exporters.formats import MONTE_CARLO_FORMATS, TEXT_FORMATS
from annotation.datasets.exports import export_bytes, export_write
from annotation.datasets.imports import chain_import
from annotation.datasets.snapshot_reads import (
    SnapshotExample,
    snapshot_examples,
    snapshot_examples_streamed,
)
from annotation.datasets.snapshots import snapshot_create
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
    return snapshot_create(project=project, heldout_fraction=0.4, include_imported=True)


def _fallback(**kwargs):
    # The portable path, in pages of 2 so paging is exercised too.
    return snapshot_examples(chunk_size=2, **kwargs)


@pytest.mark.parametrize("with_votes", [False, True])
@pytest.mark.parametrize("split", [None, "train", "heldout"])
def test_streamed_examples_equal_keyset_examples(snapshot, split, with_votes):
    # Given a snapshot with chains in both splits
    assert connection.vendor == "postgresql"

    # When read by both paths, the keyset one two rows per page
    fast = list(snapshot_examples_streamed(snapshot=snapshot, split=split, with_votes=with_votes))
    slow = list(
        snapshot_examples(snapshot=snapshot, split=split, with_votes=with_votes, chunk_size=2)
    )

    # Then they are the same examples in the same order: the chains' order
    assert fast == slow
    assert [e.chain_id for e in fast] == sorted(e.chain_id for e in fast)
    assert fast, "the split must not be empty, or the comparison proves nothing"
    if with_votes:
        assert all(
            example.votes for example in fast if any(label is not None for label in example.labels)
        )
    else:
        assert all(example.votes == [] for example in fast)


# math_shepherd reads Monte-Carlo labels, which this snapshot has none of: the same
# comparison with them is in tests/annotation/datasets/test_exports_machine_labels.py.
@pytest.mark.parametrize("fmt", [fmt for fmt in TEXT_FORMATS if fmt not in MONTE_CARLO_FORMATS])
@pytest.mark.parametrize("split", [None, "heldout"])
def test_postgresql_path_and_fallback_write_identical_exports(snapshot, monkeypatch, fmt, split):
    # Given the export of the snapshot through the PostgreSQL COPY
    fast = b"".join(export_bytes(snapshot=snapshot, fmt=fmt, ambiguous="negative", split=split))

    # When the same export reads through the portable keyset fallback
    monkeypatch.setattr(exports, "snapshot_examples_streamed", _fallback)
    slow = b"".join(export_bytes(snapshot=snapshot, fmt=fmt, ambiguous="negative", split=split))

    # Then the bytes are identical
    assert fast == slow
    assert fast.strip(), "an empty export would make the comparison vacuous"


def test_postgresql_path_and_fallback_write_identical_parquet(snapshot, monkeypatch, tmp_path):
    # Given a Parquet export read through the PostgreSQL COPY
    export_write(
        snapshot=snapshot, fmt="parquet", path=tmp_path / "fast.parquet", ambiguous="positive"
    )

    # When the same export reads through the fallback
    monkeypatch.setattr(exports, "snapshot_examples_streamed", _fallback)
    export_write(
        snapshot=snapshot, fmt="parquet", path=tmp_path / "slow.parquet", ambiguous="positive"
    )

    # Then both files hold the same rows and metadata
    fast, slow = pq.read_table(tmp_path / "fast.parquet"), pq.read_table(tmp_path / "slow.parquet")
    assert fast.num_rows > 0
    assert fast.equals(slow)
    assert fast.schema.metadata == slow.schema.metadata


def test_the_bytes_export_is_utf8_json_lines(snapshot):
    # Given the bytes export (the endpoint streams these very pieces)
    raw = b"".join(export_bytes(snapshot=snapshot, fmt="prm800k", ambiguous="positive"))

    # Then it decodes as UTF-8, one JSON object a line (split on "\n" only: U+2028 in the
    # text stays raw, as JSON allows, and is no line break here)
    text = raw.decode("utf-8")
    lines = text.removesuffix("\n").split("\n")
    assert len(lines) == snapshot.chains.count()
    problem = json.loads(lines[0])["question"]["problem"]
    assert problem.endswith(' "quoted" \\ back\tslash ünï\u2028code × 1?')


def test_closing_the_stream_early_leaves_the_connection_usable(snapshot):
    # Given a stream abandoned after its first example
    before = connection.in_atomic_block
    stream = snapshot_examples_streamed(snapshot=snapshot)
    first = next(stream)

    # When it is closed (a client that disconnects mid-download)
    stream.close()

    # Then its transaction is closed and the connection answers the next query
    assert first.chain_id > 0
    assert connection.in_atomic_block == before
    assert len(list(snapshot_examples_streamed(snapshot=snapshot))) == snapshot.chains.count()


def test_closing_a_large_stream_early_cancels_its_copy(tmp_path, monkeypatch):
    # Given a snapshot far larger than the socket buffers between PostgreSQL and us
    # (~24 MB of step text), so the server is still sending when the reader gives up
    source = tmp_path / "large.jsonl"
    with source.open("w", encoding="utf-8") as out:
        for index in range(1_500):
            record = {
                "problem": f"Large problem {index}",
                "steps": [f"{index}/{s} " + "x" * 1_600 for s in range(10)],
                "labels": [1] * 10,
            }
            out.write(json.dumps(record) + "\n")
    project = ProjectFactory()
    chain_import(project=project, path=source, fmt="generic")
    snapshot = snapshot_create(project=project, include_imported=True)
    before = connection.in_atomic_block
    cancels = []
    try_cancel = psycopg.Connection._try_cancel  # a spy: it still cancels

    def spy(self, *args, **kwargs):
        cancels.append(self)
        return try_cancel(self, *args, **kwargs)

    monkeypatch.setattr(psycopg.Connection, "_try_cancel", spy)

    # When the stream is closed after its first example
    stream = snapshot_examples_streamed(snapshot=snapshot)
    first = next(stream)
    stream.close()

    # Then the COPY was cancelled on the server rather than read to its end, its
    # transaction is closed, and the same connection reads the whole snapshot again
    assert first.steps[0].startswith("0/0 ")
    assert len(cancels) == 1
    assert connection.in_atomic_block == before
    assert sum(1 for _ in snapshot_examples_streamed(snapshot=snapshot)) == 1_500


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
    assert calls == [
        {"snapshot": snapshot, "split": "train", "with_votes": False, "with_machine": False}
    ]
    assert [e.split for e in examples] == ["train"] * len(examples)


@pytest.mark.parametrize(
    "text",
    [
        "plain step",
        "",
        "a, b",
        'say "hi"',
        "two\nlines",
        "carriage\rreturn",
        "crlf\r\nend",
        ' leading space, "both" \\ and\ttab',
        "ünïcode \u2028 😀",
    ],
)
def test_csv_text_is_what_the_csv_module_writes(text):
    # Given an example whose step texts and voter names need every kind of quoting
    example = SnapshotExample(
        chain_id=7,
        chain_hash="ab" * 32,
        split="heldout",
        labels=[1, None, -1, 0],
        support=[1.0, None, 2 / 3, 0.5],
        votes=[
            {"by": 'ann, "the" reviewer', "source": "human", "labels": [1, None, -1, 0]},
            {"by": "import", "source": "import", "labels": [1, None]},
        ],
        problem="unused",
        reference_answer="",
        final_answer="",
        generator="g",
        steps=[text, text + "!", "x", text],
        source_id=f"=id {text}",
        notes=[
            {"step": 2, "by": 'ann, "the" reviewer', "source": "human", "rating": -1},
            {"step": 2, "by": "bob", "source": "human", "rating": 1, "comment": text},
            {"step": None, "by": "bob", "source": "human", "rating": None, "rewrite": text},
        ],
    )

    # When written by the fast builder and by csv.writer over the plain rows (the old path)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(_csv_rows(example, version=3))

    # Then the bytes are identical (but that a carriage return is quoted, which Python
    # 3.11's writer leaves bare), and they read back as the rows
    fast = csv_lines.csv_text(example=example, version=3)
    if "\r" not in text.replace("\r\n", ""):
        assert fast == out.getvalue()
    rows = list(csv.reader(io.StringIO(fast, newline="")))
    assert rows == [[str(v) for v in row] for row in _csv_rows(example, version=3)]


def _csv_rows(example: SnapshotExample, *, version: int) -> list[tuple[object, ...]]:
    """The rows ``csv_text`` writes, built the plain way (the path it replaced)."""
    source_id = "" if example.source_id is None else csv_lines.csv_cell(str(example.source_id))
    notes: dict[int, list[dict[str, object]]] = {}
    for note in example.notes:  # a rewrite written for no step goes on the last
        step = len(example.steps) - 1 if note["step"] is None else note["step"]
        notes.setdefault(step, []).append({k: v for k, v in note.items() if k != "step"})
    rows = []
    for index, text in enumerate(example.steps):
        raw = {
            vote["by"]: vote["labels"][index]
            for vote in example.votes
            if index < len(vote["labels"]) and vote["labels"][index] is not None
        }
        label, support = example.labels[index], example.support[index]
        rows.append(
            (
                version,
                example.split,
                example.chain_id,
                example.chain_hash,
                index,
                csv_lines.csv_cell(text),
                "" if label is None else label,
                "" if support is None else round(support, 4),
                json.dumps(raw, ensure_ascii=False) if raw else "",
                source_id,
                json.dumps(notes[index], ensure_ascii=False) if index in notes else "",
            )
        )
    return rows
