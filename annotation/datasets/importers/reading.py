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
from collections import deque
from collections.abc import Iterator
from itertools import accumulate
from typing import Any, BinaryIO

import ijson

from annotation.datasets.importers.records import LineError, RecordAt

MAX_LINE_BYTES = 8 * 1024 * 1024
# Levels of arrays and objects a record may hold, itself included: PRM800K's lines need
# six, and free-form `meta` gets room to spare.
MAX_JSON_DEPTH = 64
# Values (arrays, objects, and the items and members in them) a record may hold. Python
# spends about 60 bytes on each decoded, ijson about 150 while building one, so an 8 MB
# line of `{},{},...` took over 600 MB; real lines hold a few thousand.
MAX_JSON_VALUES = 100_000

_BOM = b"\xef\xbb\xbf"
_JSON_WHITESPACE = b" \t\r\n"
# ijson's default read size; used to bound the look-ahead it may do past a record.
_IJSON_CHUNK = 64 * 1024
# Only escapes can put a NUL or a lone surrogate into a decoded JSON string; scanning the
# line for them first keeps the full walk off the hot path.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")

JsonRecord = tuple[RecordAt, Any]

# One JSON string (to its closing quote, or to the end of the data when cut), one
# bracket or one comma; the group holds the bracket or comma. Possessive, so a long
# string keeps no backtracking state.
_JSON_TOKEN = re.compile(rb'"(?:[^"\\]++|\\[\s\S])*+"?|([\[\]{},])')
_DEPTH_CHANGE = {b"": 0, b",": 0, b"[": 1, b"{": 1, b"]": -1, b"}": -1}
_STRUCTURE = re.compile(rb'["\[\]{},]')
# The body of a string, from just after its opening quote; the group is its closing quote.
_STRING_BODY = re.compile(rb'(?:[^"\\]++|\\[\s\S])*+(")?')
_OPENERS = frozenset(b"[{")
_QUOTE, _COMMA = ord('"'), ord(",")
_SIGNIFICANT = re.compile(rb"[^ \t\r\n]")
_CLOSE_ARRAY = ord("]")
TOO_DEEP = f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects"
TOO_MANY_VALUES = f"more than {MAX_JSON_VALUES:,} values (array items and object members)"


def json_shape_problem(
    data: bytes, *, max_depth: int = MAX_JSON_DEPTH, max_values: int = MAX_JSON_VALUES
) -> str | None:
    """Why the JSON text `data` (one whole record) is too deep or too big to decode, or
    None. Values are counted as the commas and brackets that open arrays and objects.

    Counting bytes first settles nearly every real line without scanning it. On text
    that is not JSON what is found still bounds what a parser reaches before it fails,
    since both read the same up to the first error.
    """
    openers = data.count(b"[") + data.count(b"{")
    if openers <= max_depth and openers + data.count(b",") <= max_values:
        return None
    tokens = _JSON_TOKEN.findall(data)
    if max(accumulate(map(_DEPTH_CHANGE.__getitem__, tokens)), default=0) > max_depth:
        return TOO_DEEP
    if tokens.count(b",") + tokens.count(b"[") + tokens.count(b"{") > max_values:
        return TOO_MANY_VALUES
    return None


class JsonGauge:
    """Reads JSON fed to it in pieces without parsing it, for the nesting depth and, in
    a JSON array of records, the values of each record (those inside the outer array).
    Brackets and commas inside strings do not count; a string or an escape may be cut
    between two pieces.

    With `record_lines`, it also notes the line on which each record of the outer array
    starts, in `record_starts` (the reader takes them off as the records are parsed;
    the gauge reads ahead of the parser by at most a read or two)."""

    def __init__(
        self, *, max_depth: int, max_record_values: int | None = None, record_lines: bool = False
    ) -> None:
        self.max_depth = max_depth
        self.max_record_values = max_record_values
        self.depth = 0
        self.record_values = 0
        # Why feed() stopped: TOO_DEEP or TOO_MANY_VALUES.
        self.problem: str | None = None
        self.record_starts: deque[int] | None = deque() if record_lines else None
        self._in_string = False
        self._escaped = False
        # After the outer array's `[` or a `,` between records: the next significant
        # byte starts a record (or, if it is `]`, ends the array).
        self._record_next = False
        self._line = 1  # the line at offset `_counted_to` of the piece being fed
        self._counted_to = 0

    @property
    def line_reached(self) -> int:
        """The line the scan has reached: where an error that starts no record is."""
        return self._line

    def feed(self, data: bytes) -> int | None:
        """The offset in `data` of the byte that goes past a limit, or None."""
        self._counted_to = 0
        try:
            return self._feed(data)
        finally:
            self._line += data.count(b"\n", self._counted_to)

    def _line_at(self, data: bytes, position: int) -> int:
        self._line += data.count(b"\n", self._counted_to, position)
        self._counted_to = position
        return self._line

    def _note_record_start(self, data: bytes, position: int) -> int:
        """Past the whitespace after a record's separator: notes the line where the
        record starts, if it does here; where the search for structure goes on."""
        found = _SIGNIFICANT.search(data, position)
        if found is None:
            return len(data)  # still between records: look on in the next piece
        self._record_next = False
        if self.record_starts is not None and data[found.start()] != _CLOSE_ARRAY:
            self.record_starts.append(self._line_at(data, found.start()))
        return found.start()

    def _feed(self, data: bytes) -> int | None:
        position = self._skip_string(data, 0) if self._in_string else 0
        most_values = self.max_record_values
        while True:
            if self._record_next:
                position = self._note_record_start(data, position)
            found = _STRUCTURE.search(data, position)
            if found is None:
                return None
            position = found.end()
            char = data[found.start()]
            if char == _QUOTE:
                position = self._skip_string(data, position)
                continue
            if char in _OPENERS:
                self.depth += 1
                if self.depth > self.max_depth:
                    self.problem = TOO_DEEP
                    return found.start()
                counted = self.depth > 1  # a record or a value in one, not the outer array
                self._record_next = self.depth == 1
            elif char == _COMMA:
                counted = self.depth > 1
                if not counted:  # between two records of the outer array
                    self.record_values = 0
                    self._record_next = True
            else:
                self.depth = max(self.depth - 1, 0)
                counted = False
            if counted:
                self.record_values += 1
                if most_values is not None and self.record_values > most_values:
                    self.problem = TOO_MANY_VALUES
                    return found.start()

    def _skip_string(self, data: bytes, position: int) -> int:
        """Where the string whose body starts at `position` ends: after its closing
        quote, or at the end of `data` when the string goes on in the next piece."""
        if self._escaped:
            if position >= len(data):
                return position
            position, self._escaped = position + 1, False
        body = _STRING_BODY.match(data, position)
        assert body is not None  # the pattern matches the empty string
        if body.group(1) is not None:
            self._in_string = False
            return body.end()
        self._in_string = True
        # The body stops short of the end only at a lone backslash: an escape whose
        # second byte comes with the next piece.
        self._escaped = body.end() < len(data)
        return len(data)


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


def reject_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; PostgreSQL's jsonb does not, and they are
    # not JSON, so a file carrying them is refused at the line rather than at COPY time.
    raise ValueError(f"{name} is not valid JSON")


def finite_float(text: str) -> float:
    """A JSON number with a fraction or an exponent, as a float; one past a double's range
    (``1e400``) is valid JSON but becomes infinity, which no JSON column stores."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range (beyond a 64-bit float)")
    return value


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
