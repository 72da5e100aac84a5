"""Streaming JSON records out of an upload: JSON Lines, or one JSON array.

Import files hold up to ~100,000 chains, so nothing here reads a whole file. A JSONL line
is read with a bounded `readline`, so one absurd line costs at most MAX_LINE_BYTES of
memory, is reported, and reading resumes on the next line. A JSON array is streamed
record by record with ijson; since an array cannot be resynchronised after a syntax
error, the first syntax error ends the file (reported at the record that was being
read). A record of an array is named by its index and the line where it starts (see
`RecordAt`): ijson knows neither lines nor offsets, so the byte scan that bounds the
records (`JsonGauge`) notes where each one starts.

A record's shape is bounded before any parser sees it: its nesting (MAX_JSON_DEPTH),
since ijson builds a prefix string per level for every event, so memory grows with the
square of the depth (a 40 KB file of nested arrays took about 1 GB), and the standard
library's parser and every walk over a decoded value recurse once per level; and its
number of values (MAX_JSON_VALUES), since each costs far more decoded than its bytes.
A byte scan (`json_shape_problem` for a line, `JsonGauge` for an array read in pieces)
refuses the record at its line.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from typing import Any, BinaryIO

import ijson

from annotation.datasets.importers.records import LineError, RecordAt
from annotation.json_shape import (  # noqa: F401 - the names importers and tests read here
    MAX_JSON_DEPTH,
    MAX_JSON_VALUES,
    TOO_DEEP,
    TOO_MANY_VALUES,
    JsonGauge,
    finite_float,
    json_shape_problem,
    reject_constant,
    string_too_long,
    too_deep,
    too_many_values,
)

MAX_LINE_BYTES = 8 * 1024 * 1024

_BOM = b"\xef\xbb\xbf"
_JSON_WHITESPACE = b" \t\r\n"
# ijson's default read size; used to bound the look-ahead it may do past a record.
_IJSON_CHUNK = 64 * 1024
# Only escapes can put a NUL or a lone surrogate into a decoded JSON string; scanning the
# line for them first keeps the full walk off the hot path.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")

JsonRecord = tuple[RecordAt, Any]


def iter_json_records(
    stream: BinaryIO, *, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[JsonRecord | LineError]:
    """Yield `(line, value)` for each JSON record of `stream`, or a LineError.

    The first significant byte decides the layout: `[` is a JSON array (records numbered
    by index, from 1), anything else is JSON Lines (numbered by physical line, blank lines
    counted and skipped). A UTF-8 byte-order mark at the start is ignored.
    """
    first, prefix = _sniff(stream)
    if not first:
        return
    reader = _PrefixedReader(prefix, stream)
    if first == b"[":
        yield from _iter_array(reader, max_line_bytes)
    else:
        yield from _iter_lines(reader, max_line_bytes)


def _sniff(stream: BinaryIO) -> tuple[bytes, bytes]:
    """Read up to the first significant byte; return it and everything read but the BOM
    (the whitespace must be replayed so JSONL line numbers stay right)."""
    start = stream.read(len(_BOM))
    consumed = bytearray(b"" if start == _BOM else start)
    position = 0
    while True:
        while position < len(consumed):
            if consumed[position] not in _JSON_WHITESPACE:
                return bytes(consumed[position : position + 1]), bytes(consumed)
            position += 1
        more = stream.read(1)
        if not more:
            return b"", bytes(consumed)
        consumed += more


class _PrefixedReader:
    """`stream`, with `prefix` (bytes already read from it) put back in front."""

    def __init__(self, prefix: bytes, stream: BinaryIO) -> None:
        self._prefix = prefix
        self._stream = stream

    def read(self, size: int = -1) -> bytes:
        if not self._prefix:
            return self._stream.read(size)
        if size is None or size < 0:
            data, self._prefix = self._prefix, b""
            return data + self._stream.read()
        data, self._prefix = self._prefix[:size], self._prefix[size:]
        return data

    def readline(self, size: int = -1) -> bytes:
        if not self._prefix:
            return self._stream.readline(size)
        limit = len(self._prefix) if size < 0 else min(size, len(self._prefix))
        newline = self._prefix.find(b"\n", 0, limit)
        if newline >= 0 or limit == size:
            cut = newline + 1 if newline >= 0 else limit
            data, self._prefix = self._prefix[:cut], self._prefix[cut:]
            return data
        data, self._prefix = self._prefix, b""
        return data + self._stream.readline(size - len(data) if size >= 0 else -1)


def _iter_lines(reader: _PrefixedReader, max_line_bytes: int) -> Iterator[JsonRecord | LineError]:
    line_number = 0
    while True:
        # +2 leaves room for "\r\n", so a line of exactly max_line_bytes still fits.
        raw = reader.readline(max_line_bytes + 2)
        if not raw:
            return
        line_number += 1
        if not raw.endswith(b"\n") and len(raw) == max_line_bytes + 2:
            _skip_rest_of_line(reader)
            yield LineError(line_number, f"line longer than {max_line_bytes} bytes")
            continue
        content = _strip_line_end(raw)
        if len(content) > max_line_bytes:
            yield LineError(line_number, f"line longer than {max_line_bytes} bytes")
            continue
        if not content.strip(_JSON_WHITESPACE):
            continue
        yield _decode_line(content, line_number)


def _strip_line_end(raw: bytes) -> bytes:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    return raw


def _skip_rest_of_line(reader: _PrefixedReader) -> None:
    """Discard the remainder of an over-long line chunk by chunk, never holding it."""
    while True:
        chunk = reader.readline(1024 * 1024)
        if not chunk or chunk.endswith(b"\n"):
            return


def _decode_line(content: bytes, line_number: int) -> JsonRecord | LineError:
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as error:
        return LineError(line_number, f"not valid UTF-8 at byte {error.start + 1}")
    shape_problem = json_shape_problem(content)
    if shape_problem:
        return LineError(line_number, shape_problem)
    try:
        value = json.loads(text, parse_constant=reject_constant, parse_float=finite_float)
    except json.JSONDecodeError as error:
        return LineError(line_number, f"invalid JSON: {error.msg} (col {error.colno})")
    except ValueError as error:  # NaN/Infinity, or an integer with too many digits
        return LineError(line_number, f"invalid JSON: {error}")
    except RecursionError:
        return LineError(line_number, "invalid JSON: nested too deeply")
    if _SUSPECT_ESCAPE.search(text):
        problem = unstorable_string(value)
        if problem:
            return LineError(line_number, problem)
    return RecordAt(line=line_number), value


def _iter_array(reader: _PrefixedReader, max_record_bytes: int) -> Iterator[JsonRecord | LineError]:
    # The array itself is one level more than each record.
    gauge = JsonGauge(
        max_depth=MAX_JSON_DEPTH + 1, max_record_values=MAX_JSON_VALUES, record_lines=True
    )
    starts = gauge.record_starts
    assert starts is not None
    counting = _CountingReader(reader, max_record_bytes + 2 * _IJSON_CHUNK, gauge=gauge)
    records = ijson.items(counting, "item", use_float=True, buf_size=_IJSON_CHUNK)
    index = 0
    while True:
        try:
            value = next(records)
        except StopIteration:
            return
        except (_RecordTooLong, _TooBig, ijson.JSONError, RecursionError) as error:
            # The record being read: where it starts, if the scan got that far; else the
            # line the scan reached (a file that is only "[" ends on its first line).
            at = RecordAt(line=starts[0] if starts else gauge.line_reached, record=index + 1)
            yield LineError.at_record(at, _array_error_reason(error, gauge, max_record_bytes))
            return
        index += 1
        counting.mark()
        at = RecordAt(line=starts.popleft() if starts else None, record=index)
        problem = unstorable_string(value)
        yield LineError.at_record(at, problem) if problem else (at, value)


def _array_error_reason(error: Exception, gauge: JsonGauge, max_record_bytes: int) -> str:
    """Why the array's reading stopped (the rest of it cannot be read)."""
    rest = "; the rest of the JSON array cannot be read"
    if isinstance(error, _RecordTooLong):
        return f"record longer than {max_record_bytes} bytes{rest}"
    if isinstance(error, _TooBig):
        return f"{gauge.problem}{rest}"
    if isinstance(error, RecursionError):
        return "invalid JSON: nested too deeply"
    return f"invalid JSON: {ijson_error_message(error)}{rest}"


class _RecordTooLong(Exception):
    pass


class _TooBig(Exception):
    pass


class _CountingReader:
    """Raises _RecordTooLong once more than `limit` bytes were read since the last record
    ended, so one giant array element cannot be built in memory; and _TooBig at the
    first byte past the gauge's limits, before ijson sees it. The bytes before that one
    are handed over first, so the records they complete are still read and the error
    lands on the record that holds it."""

    def __init__(self, reader: _PrefixedReader, limit: int, *, gauge: JsonGauge) -> None:
        self._reader = reader
        self._limit = limit
        self._since_mark = 0
        self._gauge = gauge
        self._too_big = False

    def mark(self) -> None:
        self._since_mark = 0

    def read(self, size: int = -1) -> bytes:
        if self._too_big:
            raise _TooBig
        data = self._reader.read(size)
        self._since_mark += len(data)
        if self._since_mark > self._limit:
            raise _RecordTooLong
        cut = self._gauge.feed(data)
        if cut is not None:
            if cut == 0:  # an empty read would mean the end of the file to ijson
                raise _TooBig
            self._too_big = True
            return data[:cut]
        return data


def ijson_error_message(error: Exception) -> str:
    """yajl's messages span several lines with a caret drawing; keep the first line."""
    message = error.args[0] if error.args else str(error)
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    first_line = str(message).strip().splitlines()
    return first_line[0] if first_line else type(error).__name__


def unstorable_string(value: Any) -> str | None:
    """The reason a decoded record cannot be stored, or None.

    A JSON escape can produce NUL (`\\u0000`) or an unpaired surrogate (`\\ud800`); neither
    can be written to PostgreSQL text/jsonb or encoded as UTF-8, so the import would
    fail at COPY time with no line number. Finding it here names the line and field. A
    float that is not finite cannot be stored either (yajl refuses ``1e400`` itself; the
    walk keeps the rule whatever ijson backend reads the array).
    The walk keeps its own stack rather than recursing, so no nesting can overflow it;
    it reports the first bad text in document order.
    """
    pending: list[tuple[Any, str]] = [(value, "")]
    while pending:
        item, path = pending.pop()
        if isinstance(item, str):
            reason = _bad_text_reason(item, path or "value")
            if reason:
                return reason
        elif isinstance(item, float) and not math.isfinite(item):
            return f"{path or 'value'}: the number {item} is out of range (beyond a 64-bit float)"
        elif isinstance(item, dict):
            entries: list[tuple[Any, str]] = []
            for key, child in item.items():
                child_path = f"{path}.{key}" if path else str(key)
                entries += ((key, child_path), (child, child_path))  # a key before its value
            pending.extend(reversed(entries))
        elif isinstance(item, list):
            pending.extend(
                (item[index], f"{path}[{index}]") for index in range(len(item) - 1, -1, -1)
            )
    return None


def _bad_text_reason(text: str, path: str) -> str | None:
    if "\x00" in text:
        return f"{path}: contains a NUL character (\\u0000), which cannot be stored"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return f"{path}: contains an unpaired surrogate escape, which is not valid Unicode"
    return None
