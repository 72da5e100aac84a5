"""What ``steplab`` prints: tables and `key: value` fields for people, JSON with
``--json``, and one line of progress on stderr while it follows a job or a run."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from steplab_client.resource import JSON


class ProgressLine:
    """One line of progress on stderr, rewritten in place on a terminal, a new line per
    change otherwise (a log keeps every state once)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.last = ""

    def show(self, line: str) -> None:
        if line == self.last:
            return
        self.last = line
        if self.stream.isatty():
            self.stream.write("\r\033[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def end(self) -> None:
        if self.last and self.stream.isatty():
            self.stream.write("\n")
            self.stream.flush()


def _megabytes(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB"


def import_progress_line(job: JSON) -> str:
    line = f"import {job['id']} {job['status']}: {job['records_read']:,} records"
    if job.get("size"):
        share = 100.0 * job["bytes_read"] / job["size"]
        line += f", {_megabytes(job['bytes_read'])} of {_megabytes(job['size'])} ({share:.0f}%)"
    return line


def run_progress_line(kind: str, run: JSON) -> str:
    line = f"{kind} {run['id']} {run['status']}"
    phase = run.get("phase")
    if run["status"] == "running" and phase:
        line += f": {phase['name']}"
        if phase.get("total"):
            line += f" {phase['done']}/{phase['total']} {phase.get('unit') or ''}".rstrip()
        if phase.get("detail"):
            line += f" ({phase['detail']})"
        if phase.get("eta_seconds") is not None:
            line += f", about {phase['eta_seconds']:.0f} s left"
    if run.get("error"):
        line += f": {run['error']}"
    return line


def lookup(row: JSON, column: str) -> Any:
    """A row's value for a column; ``a.b`` reads ``row["a"]["b"]``."""
    value: Any = row
    for key in column.split("."):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def table(rows: Sequence[JSON], columns: Sequence[str]) -> str:
    """Rows as aligned columns under a header; "(none)" for no rows."""
    if not rows:
        return "(none)"
    cells = [[_cell(lookup(row, column)) for column in columns] for row in rows]
    widths = [
        max(len(column), *(len(line[i]) for line in cells)) for i, column in enumerate(columns)
    ]
    lines = ["  ".join(column.ljust(widths[i]) for i, column in enumerate(columns)).rstrip()]
    lines += [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in cells
    ]
    return "\n".join(lines)


def _cell(value: Any, *, width: int | None = 60) -> str:
    """A value as text; in a table (``width``) cut to fit, so a row stays one line."""
    if value is None:
        text = "-"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    elif isinstance(value, float):
        text = f"{value:.3g}"
    elif isinstance(value, dict | list):
        text = json.dumps(value, separators=(",", ":"))
    else:
        text = str(value)
    if width is not None:
        text = " ".join(text.split())
        if len(text) > width:
            text = text[: width - 3] + "..."
    return text


def fields(row: JSON) -> str:
    """An object as `key: value` lines (nested values as compact JSON)."""
    width = max((len(key) for key in row), default=0)
    return "\n".join(
        f"{key.ljust(width)}  {_cell(value, width=None)}" for key, value in row.items()
    )


@dataclass(frozen=True)
class Said:
    """A command's result told in a sentence (``text``), and as the object (``data``)
    that ``--json`` prints."""

    text: str
    data: JSON


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def import_said(job: JSON) -> Said:
    """An import job as a person reads it: what it added, from which file and format, or
    where it stands while it runs."""
    result = job.get("result")
    if job["status"] != "done" or not result:
        return Said(f"Import {job['id']} is {job['status']}: {job['filename']}.", job)
    if result.get("already_imported"):
        text = (
            f"Import {job['id']} done: {result['filename']} was imported into this project "
            f"before (batch {result['batch_id']}); nothing was added."
        )
        return Said(text, job)
    if result.get("format") == "problems":
        added = _count(result.get("problems_created", 0), "problem")
        there = result.get("problems_duplicate", 0)
    else:
        added = (
            f"{_count(result['chains_created'], 'chain')} with "
            f"{_count(result['steps_created'], 'step')} and "
            f"{_count(result['labels_created'], 'label')}"
        )
        there = result["chains_duplicate"]
    text = f"Import {job['id']} done: {added} added from {result['filename']} ({result['format']})"
    text += f", {there:,} already there." if there else "."
    return Said(text, job)


def print_result(result: Any, *, as_json: bool, out: TextIO) -> None:
    if isinstance(result, Said):
        out.write((json.dumps(result.data, indent=2) if as_json else result.text) + "\n")
        return
    if isinstance(result, tuple):
        rows, columns = result
        if as_json:
            out.write(json.dumps(rows, indent=2) + "\n")
        else:
            out.write(table(rows, columns) + "\n")
        return
    if as_json:
        out.write(json.dumps(result, indent=2) + "\n")
    elif isinstance(result, dict):
        out.write(fields(result) + "\n")
    else:
        out.write(f"{result}\n")
