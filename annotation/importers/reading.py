"""Streaming JSON records out of an upload: JSON Lines, or one JSON array.

Import files hold up to ~100,000 chains, so nothing here reads a whole file. A JSONL line
is read with a bounded `readline`, so one absurd line costs at most MAX_LINE_BYTES of
memory, is reported, and reading resumes on the next line. A JSON array is streamed
record by record with ijson; since an array cannot be resynchronised after a syntax
error, the first syntax error ends the file (reported with the index of the record that
was being read).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, BinaryIO

import ijson

from annotation.importers.records import LineError

MAX_LINE_BYTES = 8 * 1024 * 1024

_BOM = b"\xef\xbb\xbf"
_JSON_WHITESPACE = b" \t\r\n"
# ijson's default read size; used to bound the look-ahead it may do past a record.
_IJSON_CHUNK = 64 * 1024
# Only escapes can put a NUL or a lone surrogate into a decoded JSON string; scanning the
# line for them first keeps the full walk off the hot path.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")

JsonRecord = tuple[int, Any]


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
    try:
        value = json.loads(text, parse_constant=_reject_constant)
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
    return line_number, value


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; PostgreSQL's jsonb does not, and they are
    # not JSON, so a file carrying them is refused at the line rather than at COPY time.
    raise ValueError(f"{name} is not valid JSON")


def _iter_array(reader: _PrefixedReader, max_record_bytes: int) -> Iterator[JsonRecord | LineError]:
    counting = _CountingReader(reader, max_record_bytes + 2 * _IJSON_CHUNK)
    records = ijson.items(counting, "item", use_float=True, buf_size=_IJSON_CHUNK)
    index = 0
    while True:
        try:
            value = next(records)
        except StopIteration:
            return
        except _RecordTooLong:
            yield LineError(
                index + 1,
                f"record longer than {max_record_bytes} bytes; "
                "the rest of the JSON array cannot be read",
            )
            return
        except ijson.JSONError as error:
            reason = f"invalid JSON: {ijson_error_message(error)}"
            yield LineError(index + 1, f"{reason}; the rest of the JSON array cannot be read")
            return
        except RecursionError:
            yield LineError(index + 1, "invalid JSON: nested too deeply")
            return
        index += 1
        counting.mark()
        problem = unstorable_string(value)
        yield LineError(index, problem) if problem else (index, value)


class _RecordTooLong(Exception):
    pass


class _CountingReader:
    """Raises _RecordTooLong once more than `limit` bytes were read since the last record
    ended, so one giant array element cannot be built in memory."""

    def __init__(self, reader: _PrefixedReader, limit: int) -> None:
        self._reader = reader
        self._limit = limit
        self._since_mark = 0

    def mark(self) -> None:
        self._since_mark = 0

    def read(self, size: int = -1) -> bytes:
        data = self._reader.read(size)
        self._since_mark += len(data)
        if self._since_mark > self._limit:
            raise _RecordTooLong
        return data


def ijson_error_message(error: Exception) -> str:
    """yajl's messages span several lines with a caret drawing; keep the first line."""
    message = error.args[0] if error.args else str(error)
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    first_line = str(message).strip().splitlines()
    return first_line[0] if first_line else type(error).__name__


def unstorable_string(value: Any, path: str = "") -> str | None:
    """The reason a decoded record cannot be stored, or None.

    A JSON escape can produce NUL (`\\u0000`) or an unpaired surrogate (`\\ud800`); neither
    can be written to PostgreSQL text/jsonb or encoded as UTF-8, so the import would
    fail at COPY time with no line number. Finding it here names the line and field.
    """
    if isinstance(value, str):
        return _bad_text_reason(value, path or "value")
    if isinstance(value, dict):
        for key, item in value.items():
            child = f"{path}.{key}" if path else str(key)
            reason = _bad_text_reason(key, child) or unstorable_string(item, child)
            if reason:
                return reason
    elif isinstance(value, list):
        for index, item in enumerate(value):
            reason = unstorable_string(item, f"{path}[{index}]")
            if reason:
                return reason
    return None


def _bad_text_reason(text: str, path: str) -> str | None:
    if "\x00" in text:
        return f"{path}: contains a NUL character (\\u0000), which cannot be stored"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return f"{path}: contains an unpaired surrogate escape, which is not valid Unicode"
    return None
