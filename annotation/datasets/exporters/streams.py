"""Writers that turn a stream of examples into an export, as they read it, so memory does
not grow with the project: JSON Lines and CSV as byte pieces of about ``PIECE_BYTES``
(for a file or an HTTP response), Parquet in row groups of ``PARQUET_ROWS_PER_GROUP``.

Bytes, not text: orjson writes UTF-8 directly, and a file or a socket wants bytes, so the
hot loop never encodes or decodes a string (the CSV lines are encoded once per piece)."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import orjson

from annotation.datasets.exporters.csv_lines import CSV_HEADER, csv_text
from annotation.datasets.exporters.records import record_notes, step_provenance, trl_record

if TYPE_CHECKING:
    from annotation.datasets.snapshot_reads import SnapshotExample

PARQUET_ROWS_PER_GROUP = 10_000
PIECE_BYTES = 256 * 1024


@dataclass
class ExportStats:
    """What an export wrote: records (chains, or step rows for csv) and labeled steps."""

    records: int = 0
    steps: int = 0


def csv_pieces(
    examples: Iterable[SnapshotExample],
    *,
    version: int,
    stats: ExportStats,
    provenance: bool = False,
    machine_agreed: bool = False,
) -> Iterator[bytes]:
    """The ``csv`` export of ``examples`` (of snapshot ``version``), header first; with
    ``machine_agreed`` (a snapshot that includes a machine source) a column
    ``machine_agreed`` says ``true`` on every step of a chain whose labels are machine
    labels routing accepted, ``false`` on the others; with ``provenance`` a last column
    holds each step's ``step_provenance`` as JSON."""
    out = io.StringIO()
    extra_columns = ("machine_agreed",) * machine_agreed + ("provenance",) * provenance
    csv.writer(out, lineterminator="\n").writerow((*CSV_HEADER, *extra_columns))
    for example in examples:
        out.write(
            csv_text(
                example=example,
                version=version,
                extra=_extra_cells(example, provenance=provenance, machine_agreed=machine_agreed),
            )
        )
        labels = example.labels
        stats.records += len(example.steps)
        stats.steps += len(labels) - labels.count(None)
        if out.tell() >= PIECE_BYTES:
            yield out.getvalue().encode("utf-8")
            out.seek(0)
            out.truncate()
    if out.tell():
        yield out.getvalue().encode("utf-8")


def _extra_cells(
    example: SnapshotExample, *, provenance: bool, machine_agreed: bool
) -> list[str] | None:
    """The cells after ``CSV_HEADER``'s, per step, joined as written (None: none)."""
    if not provenance and not machine_agreed:
        return None
    mark = ("true" if example.machine_agreed else "false") if machine_agreed else None
    entries: list[str | None] = (
        list(_provenance_cells(example)) if provenance else [None] * len(example.steps)
    )
    return [",".join(cell for cell in (mark, entry) if cell is not None) for entry in entries]


def _provenance_cells(example: SnapshotExample) -> list[str]:
    """Each step's provenance as a quoted JSON cell (JSON starts with ``{``: no formula)."""
    return [
        '"' + orjson.dumps(entry).decode().replace('"', '""') + '"'
        for entry in step_provenance(example=example)
    ]


def json_lines_pieces(
    examples: Iterable[SnapshotExample],
    *,
    record_of: Callable[[SnapshotExample], dict[str, Any] | None],
    stats: ExportStats,
    labels_key: str | None,
    steps_of: Callable[[dict[str, Any]], int] | None = None,
) -> Iterator[bytes]:
    """A JSON line per example that ``record_of`` writes (None: skipped). A record's
    labeled steps are the length of its ``labels_key`` list when given (a format that
    writes a labeled prefix: trl, openrlhf, qwen_prm), else ``steps_of(record)`` when
    given, else the example's rated steps."""
    dumps, newline = orjson.dumps, orjson.OPT_APPEND_NEWLINE
    buffer: list[bytes] = []
    size = records = steps = 0
    for example in examples:
        record = record_of(example)
        if record is None:
            continue
        line = dumps(record, option=newline)
        records += 1
        if labels_key is not None:
            steps += len(record[labels_key])
        elif steps_of is not None:
            steps += steps_of(record)
        else:
            labels = example.labels
            steps += len(labels) - labels.count(None)
        buffer.append(line)
        size += len(line)
        if size >= PIECE_BYTES:
            # Counted per piece rather than per line: attribute writes cost in this loop.
            stats.records += records
            stats.steps += steps
            records = steps = 0
            yield b"".join(buffer)
            buffer.clear()
            size = 0
    stats.records += records
    stats.steps += steps
    if buffer:
        yield b"".join(buffer)


def parquet_write(
    examples: Iterable[SnapshotExample],
    *,
    path: Path | BinaryIO,
    ambiguous: str,
    metadata: dict[str, str],
    machine_agreed: bool = False,
) -> ExportStats:
    """Write the TRL rows of ``examples`` to a Parquet file (a path or a binary file
    object), ``metadata`` in its key-value metadata, one row group per
    PARQUET_ROWS_PER_GROUP rows, so only one group is ever held in memory. With
    ``machine_agreed`` (a snapshot that includes a machine source) a boolean column
    ``machine_agreed`` after TRL's: whether the row's labels are machine labels routing
    accepted. Then ``notes``: what the voters wrote on the row's steps (``record_notes``),
    a list of {step, by, source, rating, rewrite, comment}, empty where no one wrote."""
    import pyarrow as pa  # lazily: only exports need it
    import pyarrow.parquet as pq

    fields = [
        ("prompt", pa.string()),
        ("completions", pa.list_(pa.string())),
        ("labels", pa.list_(pa.bool_())),
    ]
    if machine_agreed:
        fields.append(("machine_agreed", pa.bool_()))
    fields.append(("notes", pa.list_(_notes_type(pa))))
    schema = pa.schema(fields, metadata=metadata)
    stats = ExportStats()
    columns: dict[str, list[Any]] = {name: [] for name, _ in fields}
    with pq.ParquetWriter(path, schema) as writer:
        for example in examples:
            record = trl_record(example=example, ambiguous=ambiguous)
            if record is None:
                continue
            if machine_agreed:
                record["machine_agreed"] = example.machine_agreed
            record["notes"] = record_notes(example=example, written=len(record["labels"]))
            for name, values in columns.items():
                values.append(record[name])
            stats.records += 1
            stats.steps += len(record["labels"])
            if len(columns["prompt"]) >= PARQUET_ROWS_PER_GROUP:
                writer.write_table(pa.table(columns, schema=schema))
                columns = {name: [] for name in columns}
        if columns["prompt"] or stats.records == 0:
            writer.write_table(pa.table(columns, schema=schema))
    return stats


def _notes_type(pa: Any) -> Any:
    """A note as a Parquet struct: a field it lacks (a comment without a rewrite) is null."""
    return pa.struct(
        [
            ("step", pa.int32()),
            ("by", pa.string()),
            ("source", pa.string()),
            ("rating", pa.int8()),
            ("rewrite", pa.string()),
            ("comment", pa.string()),
        ]
    )
