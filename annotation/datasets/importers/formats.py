"""The import formats: detecting one from a file's head, and streaming chains out of a file.

Every format is read from JSON Lines or from a single JSON array of the same records
(ProcessBench ships arrays). A JSON Lines record is named by its line; a record of an
array by its index in the array and the line where it starts ("record 74 (line 1)").
In a JSON array a syntax error ends the file, reported at the record being read,
because an array cannot be resynchronised; in JSON Lines each bad line is reported and
reading goes on.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, BinaryIO

import ijson

from annotation.datasets.importers import (
    generic,
    math_shepherd,
    prm800k,
    problems,
    processbench,
    trl,
)
from annotation.datasets.importers.fields import JsonObject, RecordError, json_type
from annotation.datasets.importers.reading import (
    MAX_JSON_DEPTH,
    MAX_JSON_VALUES,
    MAX_LINE_BYTES,
    JsonGauge,
    ijson_error_message,
    iter_json_records,
)
from annotation.datasets.importers.records import LineError, ParsedChain, ParsedProblem, RecordAt

__all__ = [
    "DETECT_HEAD_BYTES",
    "FORMATS",
    "MAX_JSON_DEPTH",
    "MAX_JSON_VALUES",
    "MAX_LINE_BYTES",
    "STEP_SPLITS",
    "FormatDetectionError",
    "detect_format",
    "iter_chains",
]

FORMATS = ("prm800k", "processbench", "trl", "math_shepherd", "generic", "problems")
STEP_SPLITS = generic.STEP_SPLITS
DETECT_HEAD_BYTES = 64 * 1024

# The keys that identify each format, as shown to a person whose file was not recognised.
_SIGNATURES = (
    "prm800k (question, label)",
    "processbench (problem, steps, label)",
    "trl (prompt, completions)",
    f"math_shepherd (input, label, with '{math_shepherd.STEP_TAG}' step tags)",
    "generic (problem, steps)",
    "problems (problem, reference_answer or answer; no steps)",
)

RecordParser = Callable[[JsonObject, RecordAt], ParsedChain | ParsedProblem]

_PARSERS: dict[str, RecordParser] = {
    "prm800k": prm800k.parse_record,
    "processbench": processbench.parse_record,
    "trl": trl.parse_record,
    "math_shepherd": math_shepherd.parse_record,
    "problems": problems.parse_record,
}


class FormatDetectionError(ValueError):
    """The head of a file matches no import format; the message says what was seen."""


def iter_chains(
    stream: BinaryIO, fmt: str, *, step_split: str = "newline"
) -> Iterator[ParsedChain | ParsedProblem | LineError]:
    """Stream the chains of an import file, in file order, one record in memory at a time
    (the problems of a "problems" file, which holds no chains).

    `stream` is a binary file object (anything with `read` and `readline(size)`; an upload,
    an open file, a BytesIO). Yields a ParsedChain per good record and a LineError per
    rejected one, then stops; the caller decides what a LineError means for the import
    (Steplab's import is all-or-nothing per file). `step_split` applies to generic
    records whose steps are one string. An unknown format or step split raises
    ValueError at once, before anything is read.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown import format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if step_split not in STEP_SPLITS:
        raise ValueError(f"unknown step split {step_split!r}; expected one of {STEP_SPLITS}")
    if fmt == "generic":
        parse: RecordParser = partial(generic.parse_record, step_split=step_split)
    else:
        parse = _PARSERS[fmt]
    return _parse_records(stream, parse)


def _parse_records(
    stream: BinaryIO, parse: RecordParser
) -> Iterator[ParsedChain | ParsedProblem | LineError]:
    for item in iter_json_records(stream):
        if isinstance(item, LineError):
            yield item
            continue
        at, value = item
        if not isinstance(value, dict):
            yield LineError.at_record(at, f"expected a JSON object, got {json_type(value)}")
            continue
        try:
            yield parse(value, at)
        except RecordError as error:
            yield LineError.at_record(at, str(error))


def detect_format(head: bytes) -> str:
    """The format of a file from its first bytes (DETECT_HEAD_BYTES is plenty).

    Looks at the keys of the first record, whether the file is JSON Lines or a JSON
    array. A head that cuts a long first record short shows only the keys before the
    cut; hence PRM800K is also known by `labeler`, which comes before its long
    `question` and `label` in the real files.
    """
    first = _first_record(head)
    keys = first.keys
    if ("question" in keys and keys & {"label", "labeler"}) or {"labeler", "generation"} <= keys:
        return "prm800k"
    if {"prompt", "completions"} <= keys:
        return "trl"
    if {"input", "label"} <= keys:
        text = first.strings.get("input")
        if text is not None and math_shepherd.STEP_TAG not in text:
            raise FormatDetectionError(
                "the first record has Math-Shepherd's keys (input, label) but its input has "
                f"no '{math_shepherd.STEP_TAG}' step tags"
            )
        return "math_shepherd"
    if {"problem", "steps"} <= keys:
        return "processbench" if keys & {"label", "final_answer_correct"} else "generic"
    if "problem" in keys and keys & {"reference_answer", "answer"}:
        return "problems"
    if {"question", "reasoning_steps"} <= keys:
        raise FormatDetectionError(
            "the first record looks like MATH-APS / OmegaPRM (question, reasoning_steps): a "
            "tree of solution prefixes with Monte-Carlo values, not chains; Steplab does not "
            "import it"
        )
    seen = ", ".join(sorted(keys)) or "none"
    raise FormatDetectionError(
        f"cannot tell the format from the first record's keys ({seen}); "
        f"known formats: {'; '.join(_SIGNATURES)}"
    )


@dataclass(slots=True)
class _FirstRecord:
    keys: set[str] = field(default_factory=set)
    strings: dict[str, str] = field(default_factory=dict)


_SCALAR_TYPES = {
    "string": "string",
    "number": "number",
    "integer": "number",
    "double": "number",
    "boolean": "boolean",
    "null": "null",
    "start_array": "array",
}


def _first_record(head: bytes) -> _FirstRecord:
    """Top-level keys (and top-level string values) of the first record in `head`,
    tolerating a head that ends, or breaks, inside that record."""
    head = head.removeprefix(b"\xef\xbb\xbf")
    if not head.strip():
        raise FormatDetectionError("the file is empty")
    # ijson's memory grows with the square of the depth; the keys detection needs sit
    # at the top, so the head is cut before the first bracket past the readers' limit
    # (one more for an enclosing array) and the reader then reports that line.
    too_deep = JsonGauge(max_depth=MAX_JSON_DEPTH + 1).feed(head)
    if too_deep is not None:
        head = head[:too_deep]
    events = ijson.parse(io.BytesIO(head), multiple_values=True)
    record = _FirstRecord()
    started = False
    try:
        _enter_first_record(events)
        started = True
        _collect_keys(events, record)
    except ijson.JSONError as error:
        if not started:
            raise FormatDetectionError(
                f"the file does not start with JSON records ({ijson_error_message(error)}); "
                "expected JSON Lines or a JSON array of objects"
            ) from None
    return record


def _enter_first_record(events: Iterator[tuple[str, str, Any]]) -> None:
    """Consume events up to the opening of the first record (JSONL or array item)."""
    _prefix, event, _value = next(events)
    if event == "start_array":
        _prefix, event, _value = next(events)
        if event == "end_array":
            raise FormatDetectionError("the file is an empty JSON array")
    if event != "start_map":
        kind = _SCALAR_TYPES.get(event, event)
        raise FormatDetectionError(f"the first record is a JSON {kind}, not an object")


def _collect_keys(events: Iterator[tuple[str, str, Any]], record: _FirstRecord) -> None:
    depth = 1
    last_key = ""
    for _prefix, event, value in events:
        if event in ("start_map", "start_array"):
            depth += 1
        elif event in ("end_map", "end_array"):
            depth -= 1
            if depth == 0:
                return
        elif event == "map_key" and depth == 1:
            record.keys.add(value)
            last_key = value
        elif event == "string" and depth == 1:
            record.strings[last_key] = value
