"""Exports: a snapshot's consensus labels in the formats PRM trainers and tools read.

Every export streams: it reads the snapshot through ``snapshot_examples_streamed`` (one
``COPY (query) TO STDOUT`` on PostgreSQL, which the server computes while we write;
keyset pages elsewhere), in chain order, and writes as it reads, so memory does not grow
with the project. The one write path behind the `export_dataset` command and the export
endpoint.

Formats (one record per chain unless said otherwise):

- ``prm800k``: PRM800K's raw line shape. Every step is a single completion with
  ``chosen_completion: 0`` and its consensus rating (null where unlabeled); all steps of
  the chain are written, also the unrated ones after a first error, so importing the
  file gives back the very same chains (same content hashes) and labels.
  ``finish_reason``: ``found_error`` with a -1, ``solution`` when every step is rated,
  else ``give_up``.
- ``trl``: TRL stepwise supervision ``{"prompt", "completions", "labels": [bool]}``. A
  trainer needs a boolean for every completion, so the chain is cut before its first
  unrated step; an ambiguous (0) step becomes true (``positive``), false (``negative``)
  or cuts the chain there (``drop``). A chain left with no step is not written.
- ``parquet``: the same TRL rows, in row groups of PARQUET_ROWS_PER_GROUP, with the
  snapshot and the ambiguous mapping in the file's key-value metadata ("steplab").
- ``processbench``: ``{"id", "generator", "problem", "steps", "label",
  "final_answer_correct"}``; ``label`` is the index of the earliest -1 (an ambiguous
  step counts as the error only with ``negative``), or -1 when every step is rated and
  none is wrong. A chain with no error but unrated steps cannot claim "no error" and is
  not written. ``final_answer_correct`` compares the final answer with the problem's
  reference answer (ignoring spaces and $), null when either is missing.
- ``csv``: one row per step: snapshot version, split, chain id and hash, step index and
  text, consensus, support, and ``raw_labels``, a JSON object {voter: rating} of the
  current votes on that step (per-annotator columns would change with every export).
  A step text that a spreadsheet would read as a formula (it begins, after any spaces,
  with ``= + - @``, their fullwidth forms, a tab or a carriage return) is written with a
  leading apostrophe (OWASP's rule against CSV injection, see ``csv_cell``); the JSON
  Lines and Parquet outputs carry every text byte for byte.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO

import orjson
from django.core.exceptions import ValidationError

from annotation.models import Snapshot, SnapshotSplit
from annotation.selectors.datasets import SnapshotExample, snapshot_examples_streamed
from annotation.services.snapshots import AMBIGUOUS_CHOICES, DEFAULT_AMBIGUOUS

EXPORT_FORMATS = ("prm800k", "trl", "processbench", "csv", "parquet")
TEXT_FORMATS = ("prm800k", "trl", "processbench", "csv")
# What each file holds, in a line: the export buttons and the command's help say it.
EXPORT_DESCRIPTIONS = {
    "prm800k": "JSON Lines, a chain a line in PRM800K's shape: every step with its "
    "consensus rating (re-importable as is)",
    "trl": "JSON Lines in TRL's stepwise schema (prompt, completions, labels as booleans), "
    "each chain cut at its first unrated step",
    "processbench": "JSON Lines in ProcessBench's schema: the index of the first wrong "
    "step (-1: none) and whether the final answer is right",
    "csv": "a row a step: split, chain, text, consensus, support and every current vote",
    "parquet": "the TRL rows (same schema) in Parquet, the snapshot named in its metadata",
}
CONTENT_TYPES = {
    "prm800k": "application/x-ndjson",
    "trl": "application/x-ndjson",
    "processbench": "application/x-ndjson",
    "csv": "text/csv",
    "parquet": "application/vnd.apache.parquet",
}
EXTENSIONS = {
    "prm800k": "jsonl",
    "trl": "jsonl",
    "processbench": "jsonl",
    "csv": "csv",
    "parquet": "parquet",
}
CSV_HEADER = (
    "snapshot_version",
    "split",
    "chain_id",
    "chain_hash",
    "step_index",
    "step_text",
    "consensus",
    "support",
    "raw_labels",
)
PARQUET_ROWS_PER_GROUP = 10_000
# Output is handed out (to a file or an HTTP response) in pieces of about this size.
_PIECE_BYTES = 256 * 1024


@dataclass
class ExportStats:
    """What an export wrote: records (chains, or step rows for csv) and labeled steps."""

    records: int = 0
    steps: int = 0


@dataclass(frozen=True)
class ExportResult:
    snapshot: Snapshot
    format: str
    ambiguous: str
    split: str | None
    records: int
    steps: int
    path: Path | None = None


def export_options_check(
    *, fmt: str, ambiguous: str | None, split: str | None, snapshot: Snapshot
) -> str:
    """Validate the options; the ambiguous mapping to use (the snapshot's own default,
    ``meta["trl_ambiguous"]``, unless overridden). Raises ValidationError."""
    errors: dict[str, str] = {}
    if fmt not in EXPORT_FORMATS:
        errors["format"] = f"Must be one of {', '.join(EXPORT_FORMATS)}."
    if ambiguous is not None and ambiguous not in AMBIGUOUS_CHOICES:
        errors["ambiguous"] = f"Must be one of {', '.join(AMBIGUOUS_CHOICES)}."
    if split is not None and split not in SnapshotSplit.values:
        errors["split"] = f"Must be one of {', '.join(SnapshotSplit.values)}."
    if errors:
        raise ValidationError(errors)
    return ambiguous or snapshot.meta.get("trl_ambiguous", DEFAULT_AMBIGUOUS)


# --- records: pure functions of one example ------------------------------------------


def trl_labels(*, labels: list[int | None], ambiguous: str) -> list[bool]:
    """The boolean labels of the labeled prefix TRL gets (see the module docstring).

    >>> trl_labels(labels=[1, 0, -1, None], ambiguous="positive")
    [True, True, False]
    >>> trl_labels(labels=[1, 0, -1], ambiguous="drop")
    [True]
    """
    out: list[bool] = []
    for label in labels:
        if label is None:
            break
        if label == 0:
            if ambiguous == "drop":
                break
            out.append(ambiguous == "positive")
        else:
            out.append(label == 1)
    return out


def trl_record(*, example: SnapshotExample, ambiguous: str) -> dict[str, Any] | None:
    labels = trl_labels(labels=example.labels, ambiguous=ambiguous)
    if not labels:
        return None
    return {
        "prompt": example.problem,
        "completions": example.steps[: len(labels)],
        "labels": labels,
    }


def prm800k_record(*, example: SnapshotExample) -> dict[str, Any]:
    labels = example.labels
    if -1 in labels:
        finish_reason = "found_error"
    elif None in labels:
        finish_reason = "give_up"
    else:
        finish_reason = "solution"
    return {
        "question": {
            "problem": example.problem,
            "ground_truth_answer": example.reference_answer or None,
        },
        "label": {
            "steps": [
                {
                    "completions": [{"text": text, "rating": rating, "flagged": False}],
                    "human_completion": None,
                    "chosen_completion": 0,
                }
                for text, rating in zip(example.steps, labels, strict=True)
            ],
            "total_time": None,
            "finish_reason": finish_reason,
        },
    }


def first_error_index(*, labels: list[int | None], ambiguous: str) -> int | None:
    """ProcessBench's label: the earliest wrong step, -1 for none, None when unrated
    steps leave it unknown.

    >>> first_error_index(labels=[1, 0, -1], ambiguous="negative")
    1
    >>> first_error_index(labels=[1, 1, None], ambiguous="drop")
    """
    for index, label in enumerate(labels):
        if label == -1 or (label == 0 and ambiguous == "negative"):
            return index
        if label is None:
            return None
    return -1


def _answer_key(text: str) -> str:
    return "".join(text.replace("$", "").split())


def processbench_record(
    *, example: SnapshotExample, ambiguous: str, project_id: int
) -> dict[str, Any] | None:
    label = first_error_index(labels=example.labels, ambiguous=ambiguous)
    if label is None:
        return None
    correct = None
    if example.final_answer and example.reference_answer:
        correct = _answer_key(example.final_answer) == _answer_key(example.reference_answer)
    return {
        "id": f"steplab-{project_id}-{example.chain_id}",
        "generator": example.generator,
        "problem": example.problem,
        "steps": example.steps,
        "label": label,
        "final_answer_correct": correct,
    }


# OWASP's "CSV injection": a cell a spreadsheet evaluates as a formula. Excel and
# LibreOffice skip leading spaces and accept the fullwidth signs too, so those count.
_FORMULA_START = re.compile(r"^[ \u3000]*[=+\-@\uff1d\uff0b\uff0d\uff20\t\r]")


def csv_cell(text: str) -> str:
    """A step text as a spreadsheet must show it: one that would start a formula gets a
    leading apostrophe (``'=1+1``), which spreadsheets read as "this is text" and hide;
    every other text is left as it is. Quoting is the CSV writer's business."""
    if _FORMULA_START.match(text) is not None:
        return "'" + text
    return text


def csv_rows(*, example: SnapshotExample, version: int) -> Iterator[tuple[Any, ...]]:
    for index, text in enumerate(example.steps):
        raw = {
            vote["by"]: vote["labels"][index]
            for vote in example.votes
            if index < len(vote["labels"]) and vote["labels"][index] is not None
        }
        label = example.labels[index]
        support = example.support[index]
        yield (
            version,
            example.split,
            example.chain_id,
            example.chain_hash,
            index,
            csv_cell(text),
            "" if label is None else label,
            "" if support is None else round(support, 4),
            _raw_labels_json(tuple(raw.items())) if raw else "",
        )


@lru_cache(maxsize=4096)
def _raw_labels_json(items: tuple[tuple[str, int], ...]) -> str:
    # A project has few voters and three ratings, so the same few objects repeat on
    # every step: encode each once rather than a million times.
    return json.dumps(dict(items), ensure_ascii=False)


@lru_cache(maxsize=4096)
def _raw_labels_field(items: tuple[tuple[str, int], ...]) -> str:
    """``raw_labels`` as a CSV field: a JSON object always holds a quote, so it is always
    quoted, its quotes doubled (as csv's minimal quoting writes it)."""
    return '"' + _raw_labels_json(items).replace('"', '""') + '"'


# A step text with one of these is quoted. ``csv`` (3.11) quotes a comma, a quote or a
# newline but leaves a lone carriage return bare, and its own reader then splits the row
# there; quoting it too keeps every step text readable.
_CSV_SPECIAL = re.compile(r'[",\n\r]')


def csv_text(*, example: SnapshotExample, version: int) -> str:
    """The CSV lines of one example: what ``csv.writer(lineterminator="\\n")`` writes for
    ``csv_rows``, byte for byte (but for a carriage return, see _CSV_SPECIAL), built
    without it.

    Why: the writer examines every character of every field to decide on quoting, and
    that was most of a CSV export's time. Here only the step text can need quoting (the
    other fields are numbers, the split, a hex hash and a JSON object that always needs
    it), so the common row is one join."""
    prefix = f"{version},{example.split},{example.chain_id},{example.chain_hash},"
    voters = [(vote["by"], vote["labels"]) for vote in example.votes]
    labels, support = example.labels, example.support
    lines: list[str] = []
    for index, text in enumerate(example.steps):
        text = csv_cell(text)
        if _CSV_SPECIAL.search(text) is not None:
            text = '"' + text.replace('"', '""') + '"'
        raw = tuple(
            (by, votes[index])
            for by, votes in voters
            if index < len(votes) and votes[index] is not None
        )
        label = labels[index]
        value = support[index]
        lines.append(
            f"{prefix}{index},{text},{'' if label is None else label},"
            f"{'' if value is None else round(value, 4)},"
            f"{_raw_labels_field(raw) if raw else ''}\n"
        )
    return "".join(lines)


# --- streams -------------------------------------------------------------------------


def _labeled(labels: list[int | None]) -> int:
    return len(labels) - labels.count(None)


def export_bytes(
    *,
    snapshot: Snapshot,
    fmt: str,
    ambiguous: str,
    split: str | None = None,
    stats: ExportStats | None = None,
) -> Iterator[bytes]:
    """The export as UTF-8 pieces of about _PIECE_BYTES, for a file or an HTTP response.
    ``stats`` (when given) is filled in as the pieces are produced. Options must have
    passed ``export_options_check``.

    Bytes, not text: orjson writes UTF-8 directly, and a file or a socket wants bytes, so
    the hot loop never encodes or decodes a string."""
    stats = stats if stats is not None else ExportStats()
    examples = snapshot_examples_streamed(snapshot=snapshot, split=split, with_votes=fmt == "csv")
    if fmt == "csv":
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerow(CSV_HEADER)
        version = snapshot.version
        for example in examples:
            out.write(csv_text(example=example, version=version))
            stats.records += len(example.steps)
            stats.steps += _labeled(example.labels)
            if out.tell() >= _PIECE_BYTES:
                yield out.getvalue().encode("utf-8")
                out.seek(0)
                out.truncate()
        if out.tell():
            yield out.getvalue().encode("utf-8")
        return

    record_of = _json_record_builder(fmt=fmt, ambiguous=ambiguous, snapshot=snapshot)
    dumps, newline = orjson.dumps, orjson.OPT_APPEND_NEWLINE
    buffer: list[bytes] = []
    size = records = steps = 0
    is_trl = fmt == "trl"
    for example in examples:
        record = record_of(example)
        if record is None:
            continue
        line = dumps(record, option=newline)
        records += 1
        if is_trl:
            steps += len(record["labels"])
        else:
            labels = example.labels
            steps += len(labels) - labels.count(None)
        buffer.append(line)
        size += len(line)
        if size >= _PIECE_BYTES:
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


def export_text(
    *,
    snapshot: Snapshot,
    fmt: str,
    ambiguous: str,
    split: str | None = None,
    stats: ExportStats | None = None,
) -> Iterator[str]:
    """``export_bytes`` as text pieces, for callers that want str."""
    for piece in export_bytes(
        snapshot=snapshot, fmt=fmt, ambiguous=ambiguous, split=split, stats=stats
    ):
        yield piece.decode("utf-8")


def _json_record_builder(
    *, fmt: str, ambiguous: str, snapshot: Snapshot
) -> Callable[[SnapshotExample], dict[str, Any] | None]:
    if fmt == "prm800k":
        return lambda example: prm800k_record(example=example)
    if fmt == "trl":
        return lambda example: trl_record(example=example, ambiguous=ambiguous)
    if fmt == "processbench":
        project_id = snapshot.project_id
        return lambda example: processbench_record(
            example=example, ambiguous=ambiguous, project_id=project_id
        )
    raise ValueError(f"{fmt} is not a JSON Lines export format")


def parquet_metadata(*, snapshot: Snapshot, ambiguous: str, split: str | None) -> dict[str, str]:
    return {
        "steplab": json.dumps(
            {
                "project": snapshot.project_id,
                "snapshot_version": snapshot.version,
                "snapshot_hash": snapshot.content_hash,
                "ambiguous": ambiguous,
                "split": split,
            }
        )
    }


def export_parquet(
    *, snapshot: Snapshot, path: Path | BinaryIO, ambiguous: str, split: str | None = None
) -> ExportStats:
    """Write the TRL rows to a Parquet file (a path or a binary file object), one row
    group per PARQUET_ROWS_PER_GROUP rows, so only one group is ever held in memory."""
    import pyarrow as pa  # lazily: only exports need it
    import pyarrow.parquet as pq

    schema = pa.schema(
        [
            ("prompt", pa.string()),
            ("completions", pa.list_(pa.string())),
            ("labels", pa.list_(pa.bool_())),
        ],
        metadata=parquet_metadata(snapshot=snapshot, ambiguous=ambiguous, split=split),
    )
    stats = ExportStats()
    columns: dict[str, list[Any]] = {"prompt": [], "completions": [], "labels": []}
    with pq.ParquetWriter(path, schema) as writer:
        for example in snapshot_examples_streamed(snapshot=snapshot, split=split):
            record = trl_record(example=example, ambiguous=ambiguous)
            if record is None:
                continue
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


def export_write(
    *,
    snapshot: Snapshot,
    fmt: str,
    path: Path,
    ambiguous: str | None = None,
    split: str | None = None,
) -> ExportResult:
    """Write the export of ``snapshot`` to ``path``. Raises ValidationError for bad
    options and OSError when the file cannot be written."""
    mapping = export_options_check(fmt=fmt, ambiguous=ambiguous, split=split, snapshot=snapshot)
    if fmt == "parquet":
        stats = export_parquet(snapshot=snapshot, path=path, ambiguous=mapping, split=split)
    else:
        stats = ExportStats()
        with path.open("wb", buffering=1024 * 1024) as out:
            for piece in export_bytes(
                snapshot=snapshot, fmt=fmt, ambiguous=mapping, split=split, stats=stats
            ):
                out.write(piece)
    return ExportResult(
        snapshot=snapshot,
        format=fmt,
        ambiguous=mapping,
        split=split,
        records=stats.records,
        steps=stats.steps,
        path=path,
    )
