"""The ``csv`` export: one row per step, its cells safe to open in a spreadsheet."""

from __future__ import annotations

import json
import re
import unicodedata
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from annotation.datasets.snapshot_reads import SnapshotExample

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
    # The id the chain's source record gave it (ProcessBench's, a generic line's): what
    # joins a row back to the file it came from. Empty where the record had none.
    "source_id",
)


# OWASP's "CSV injection": a cell a spreadsheet evaluates as a formula, one that starts
# with = + - @, a tab, a carriage return or a line feed (OWASP; ASVS 1.2.10 adds NUL). A
# spreadsheet skips what it does not show before it decides: spaces of every kind, and
# invisible characters (Unicode's format characters, such as the zero-width space U+200B,
# the byte-order mark U+FEFF, joiners and direction marks, and control characters), so
# "\u200b=1+1" ran as a formula. Those are skipped here too; and the fullwidth and small
# forms of the signs (and the minus sign U+2212) count as the signs.
_FORMULA_SIGNS = frozenset("=+-@\t\r\n\x00\uff1d\uff0b\uff0d\uff20\ufe62\ufe63\ufe66\ufe6b\u2212")
_SKIPPED_CATEGORIES = frozenset({"Cc", "Cf", "Zs", "Zl", "Zp"})


def _starts_a_formula(text: str) -> bool:
    for char in text:
        if char in _FORMULA_SIGNS:
            return True
        if unicodedata.category(char) not in _SKIPPED_CATEGORIES:
            return False
    return False


def csv_cell(text: str) -> str:
    """A step text as a spreadsheet must show it: one that would start a formula gets a
    leading apostrophe (``'=1+1``), which spreadsheets read as "this is text" and hide;
    every other text is left as it is. Quoting is the CSV writer's business."""
    # Most texts start with a letter or a digit: settled without the walk.
    if text[:1].isalnum() or not _starts_a_formula(text):
        return text
    return "'" + text


def _source_id_cell(example: SnapshotExample) -> str:
    return "" if example.source_id is None else csv_cell(str(example.source_id))


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


def csv_text(*, example: SnapshotExample, version: int, extra: list[str] | None = None) -> str:
    """The CSV lines of one example: what ``csv.writer(lineterminator="\\n")`` writes for
    its rows (one per step, the columns of ``CSV_HEADER``), byte for byte (but for a
    carriage return, see _CSV_SPECIAL), built without it.

    Why: the writer examines every character of every field to decide on quoting, and
    that was most of a CSV export's time. Here only the step text can need quoting (the
    other fields are numbers, the split, a hex hash and a JSON object that always needs
    it), so the common row is one join. ``extra``: a last cell per step, written as
    given (already quoted)."""
    prefix = f"{version},{example.split},{example.chain_id},{example.chain_hash},"
    voters = [(vote["by"], vote["labels"]) for vote in example.votes]
    labels, support = example.labels, example.support
    source_id = _source_id_cell(example)
    if _CSV_SPECIAL.search(source_id) is not None:
        source_id = '"' + source_id.replace('"', '""') + '"'
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
            f"{_raw_labels_field(raw) if raw else ''},{source_id}"
            + (f",{extra[index]}\n" if extra is not None else "\n")
        )
    return "".join(lines)
