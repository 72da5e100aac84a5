"""The ``csv`` export: one row per step, its cells safe to open in a spreadsheet."""

from __future__ import annotations

import json
import re
import unicodedata
from functools import lru_cache
from typing import TYPE_CHECKING

import regex

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
    # What the voters wrote on the step: a JSON list of {"by", "source", "rating",
    # "rewrite"?, "comment"?} (``SnapshotChain.notes``). Empty where no one wrote.
    "notes",
)


# OWASP's "CSV injection": a cell a spreadsheet evaluates as a formula, one that starts
# with = + - @, a tab, a carriage return or a line feed (OWASP; ASVS 1.2.10 adds NUL). A
# spreadsheet skips what it does not show before it decides, so the check does too, by
# Unicode's properties rather than a list: White_Space (spaces of every kind, line and
# paragraph separators), Default_Ignorable_Code_Point (zero-width characters, joiners,
# direction marks, the byte-order mark, variation selectors, tags, the combining grapheme
# joiner U+034F, the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0), control and format
# characters, and what Unicode names a blank or a filler (the Braille blank U+2800, which
# no property sets apart). "\u3164=1+1" so starts a formula. The fullwidth and small forms
# of the signs (and the minus sign U+2212) count as the signs.
_FORMULA_SIGNS = frozenset("=+-@\t\r\n\x00\uff1d\uff0b\uff0d\uff20\ufe62\ufe63\ufe66\ufe6b\u2212")
_UNSEEN = regex.compile(r"[\p{White_Space}\p{Default_Ignorable_Code_Point}\p{Cc}\p{Cf}\p{Z}]")


@lru_cache(maxsize=1024)
def _unseen(char: str) -> bool:
    """Whether a spreadsheet shows nothing for ``char`` (above).

    >>> [_unseen(c) for c in ("\u3164", "\u2800", "\ufe0f", "\u2801", "a")]
    [True, True, True, False, False]
    """
    if _UNSEEN.match(char) is not None:
        return True
    return unicodedata.name(char, "").endswith((" BLANK", " FILLER"))


def _starts_a_formula(text: str) -> bool:
    for char in text:
        if char in _FORMULA_SIGNS:
            return True
        if not _unseen(char):
            return False
    return False


def csv_cell(text: str) -> str:
    """A step text as a spreadsheet must show it: one that would start a formula gets a
    leading apostrophe (``'=1+1``), which spreadsheets read as "this is text" and hide;
    every other text is left as it is. Quoting is the CSV writer's business."""
    # Most texts start with an ASCII letter or digit: settled without the walk (not any
    # letter: the Hangul fillers are letters that show nothing).
    first = text[:1]
    if (first.isascii() and first.isalnum()) or not _starts_a_formula(text):
        return text
    return "'" + text


def _notes_cells(example: SnapshotExample) -> list[str]:
    """Each step's ``notes`` cell: its entries as quoted JSON (a list: no formula), or
    empty. A rewrite written for no step (a pass that marked none wrong) goes on the
    last step."""
    by_step: dict[int, list[dict[str, object]]] = {}
    last = len(example.steps) - 1
    for note in example.notes:
        step = note["step"] if note["step"] is not None else last
        by_step.setdefault(step, []).append({k: v for k, v in note.items() if k != "step"})
    return [
        '"' + json.dumps(by_step[index], ensure_ascii=False).replace('"', '""') + '"'
        if index in by_step
        else ""
        for index in range(len(example.steps))
    ]


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
    notes = _notes_cells(example) if example.notes else None
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
            f"{_raw_labels_field(raw) if raw else ''},{source_id},"
            f"{notes[index] if notes is not None else ''}"
            + (f",{extra[index]}\n" if extra is not None else "\n")
        )
    return "".join(lines)
