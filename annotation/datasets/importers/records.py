"""What the import parsers produce: one `ParsedChain` per good record, one `LineError` per
rejected one. Plain dataclasses, no Django, so the parsers are tested and benchmarked alone
and the import service can stream them straight into COPY."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple


@dataclass(frozen=True, slots=True)
class ParsedChain:
    """One reasoning chain read from an import file, validated and normalised.

    Texts are stripped of surrounding whitespace only; inside they are verbatim (LaTeX,
    markdown and HTML-looking text are data, never markup). `labels` is None when the
    record carries no rating at all; otherwise it has one entry per step, None for a step
    nobody rated (e.g. the steps after ProcessBench's first error).
    """

    line: int | None  # where the record starts: see RecordAt
    problem: str
    steps: tuple[str, ...]
    answer: str = ""
    reference_answer: str = ""
    generator: str = ""
    labels: tuple[int | None, ...] | None = None
    label_source: str = ""
    # hash=False: a dict is unhashable, and the chain's identity is its text anyway.
    meta: dict[str, Any] = field(default_factory=dict, hash=False)
    record: int | None = None  # its 1-based index in a JSON array; None in JSON Lines

    @property
    def at(self) -> RecordAt:
        return RecordAt(line=self.line, record=self.record)


@dataclass(frozen=True, slots=True)
class ParsedProblem:
    """One problem read from a problems file: its text and reference answer, no chain
    (what a sampling run draws chains for). Stripped like a chain's texts."""

    line: int | None  # where the record starts: see RecordAt
    problem: str
    reference_answer: str
    record: int | None = None  # its 1-based index in a JSON array; None in JSON Lines


class RecordAt(NamedTuple):
    """Where a record is in its file, as a person looks for it there. In JSON Lines,
    `line` is the record's 1-based line and `record` is None. In a JSON array, `record`
    is the record's 1-based index in the array and `line` the line where it starts
    (None when the file ended before the record did): ProcessBench ships its arrays on
    one line, where "line 74" would point at nothing.

    >>> str(RecordAt(line=74)), str(RecordAt(line=1, record=74)), str(RecordAt(None, 3))
    ('line 74', 'record 74 (line 1)', 'record 3')
    """

    line: int | None
    record: int | None = None

    def __str__(self) -> str:
        if self.record is None:
            return f"line {self.line}"
        if self.line is None:
            return f"record {self.record}"
        return f"record {self.record} (line {self.line})"


@dataclass(frozen=True, slots=True)
class LineError:
    """A rejected record, found at `line` (and `record`, in a JSON array: see RecordAt);
    `reason` names the field, e.g. "steps[2]: empty step", or says it is missing."""

    line: int | None
    reason: str
    record: int | None = None

    @classmethod
    def at_record(cls, at: RecordAt, reason: str) -> LineError:
        return cls(line=at.line, reason=reason, record=at.record)

    @property
    def where(self) -> str:
        """ "line 74", or "record 74 (line 1)" in a JSON array."""
        return str(RecordAt(line=self.line, record=self.record))


def content_hash(problem: str, steps: Sequence[str]) -> str:
    """The chain's identity for deduplication: sha256 over problem and step texts.

    The encoding is canonical JSON (no ASCII escaping, no spaces), so the hash does not
    depend on how the source file happened to escape or space its text, and a step
    boundary can never be confused with text ("a", "b" differs from "a\\nb").

    >>> content_hash("1+1?", ["1+1=2", "# Answer 2"])
    '72e63d94de5bd0e222ae39f9cd2debe8d96f1a0a8372f04da07448b9be1e171d'
    >>> one_step = content_hash("1+1?", ["1+1=2\\n# Answer 2"])
    >>> one_step == content_hash("1+1?", ["1+1=2", "# Answer 2"])
    False
    """
    canonical = json.dumps([problem, list(steps)], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
