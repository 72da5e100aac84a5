"""A JSON document's shape, bounded from its bytes before any parser builds a value:
its nesting, its number of values and its longest string (``json_shape_problem`` for
bytes in hand, ``JsonGauge`` for a document read in pieces), and the number rules no JSON
column can store (``reject_constant``, ``finite_float``). Imports
(``datasets.importers.reading``) and the API's JSON parser (``api.parsers``) both bound
what they decode with it: a document's decoded size is not its byte size (``[{},{},...]``
is about 60 bytes of Python per 3 bytes written)."""

from __future__ import annotations

import math
import re
from array import array
from collections import deque
from itertools import accumulate
from typing import Any

# Levels of arrays and objects a record may hold, itself included: PRM800K's lines need
# six, and free-form `meta` gets room to spare.
MAX_JSON_DEPTH = 64
# Values (arrays, objects, and the items and members in them) a record may hold. Python
# spends about 60 bytes on each decoded, ijson about 150 while building one, so an 8 MB
# line of `{},{},...` took over 600 MB; real lines hold a few thousand.
MAX_JSON_VALUES = 100_000

# One JSON string, to its closing quote (or to the end of the data when cut). Possessive,
# so a long string keeps no backtracking state.
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\[\s\S])*+"?')
# A bracket as a step of the depth (a signed byte): +1 opens, -1 closes; all else dropped.
_DEPTH_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKET = bytes(sorted(set(range(256)) - set(b"[]{}")))
_STRUCTURE = re.compile(rb'["\[\]{},]')
# The body of a string, from just after its opening quote; the group is its closing quote.
_STRING_BODY = re.compile(rb'(?:[^"\\]++|\\[\s\S])*+(")?')
_OPENERS = frozenset(b"[{")
_QUOTE, _COMMA = ord('"'), ord(",")
_SIGNIFICANT = re.compile(rb"[^ \t\r\n]")
_CLOSE_ARRAY = ord("]")


def too_deep(max_depth: int) -> str:
    return f"nested deeper than {max_depth} levels of arrays and objects"


def too_many_values(max_values: int) -> str:
    return f"more than {max_values:,} values (array items and object members)"


def string_too_long(max_string_bytes: int) -> str:
    return f"a string longer than {max_string_bytes:,} bytes as written"


TOO_DEEP = too_deep(MAX_JSON_DEPTH)
TOO_MANY_VALUES = too_many_values(MAX_JSON_VALUES)


def json_shape_problem(
    data: bytes,
    *,
    max_depth: int = MAX_JSON_DEPTH,
    max_values: int = MAX_JSON_VALUES,
    max_string_bytes: int | None = None,
) -> str | None:
    """Why the JSON text `data` (one whole record, or a request body) is too deep, holds
    too many values or (with `max_string_bytes`) too long a string to decode, or None.
    Values are counted as the commas and brackets that open arrays and objects; a
    string's length is its bytes as written between its quotes (escapes included).

    Counting bytes first settles nearly every real text without scanning it. Otherwise
    every string is emptied (one pass of the regex engine, so brackets and commas inside
    strings do not count) and what is left is counted the same way; no value is built.
    On text that is not JSON what is found still bounds what a parser reaches before it
    fails, since both read the same up to the first error.

    >>> json_shape_problem(b'[{}, {}, {}]', max_values=3)
    'more than 3 values (array items and object members)'
    >>> json_shape_problem(b'["[[[[", {"a": [1]}]', max_depth=3) is None
    True
    """
    openers = data.count(b"[") + data.count(b"{")
    if (
        openers <= max_depth
        and openers + data.count(b",") <= max_values
        and (max_string_bytes is None or len(data) <= max_string_bytes + 2)
    ):
        return None
    # Each string is a value or an object's key, so there are at most two per value (and
    # one alone). A quote after a backslash may be escaped, so only the others surely
    # delimit a string. This keeps the pass below to a bounded number of strings.
    surely_delimiting = data.count(b'"') - data.count(b'\\"')
    if surely_delimiting > 2 * (2 * max_values + 1):
        return too_many_values(max_values)
    bare = _JSON_STRING.sub(b'""', data) if b'"' in data else data
    openers = bare.count(b"[") + bare.count(b"{")
    if openers + bare.count(b",") > max_values:
        return too_many_values(max_values)
    if openers > max_depth:
        steps = array("b", bare.translate(_DEPTH_STEP, _NOT_BRACKET))
        if max(accumulate(steps), default=0) > max_depth:
            return too_deep(max_depth)
    # The strings' bytes together, then (with at most a value's worth of strings left to
    # look at, the values being bounded) the longest.
    if max_string_bytes is not None and len(data) - len(bare) > max_string_bytes:
        longest = max((m.end() - m.start() - 2 for m in _JSON_STRING.finditer(data)), default=0)
        if longest > max_string_bytes:
            return string_too_long(max_string_bytes)
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
