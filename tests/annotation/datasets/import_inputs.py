"""Hypothesis strategies for import files that stress memory: deep nesting (in `meta`, or
a whole line of brackets), wide records (many small values), long texts and many steps
near the per-chain limits, and malformed bytes (cut, inserted, replaced), in JSON Lines or
in a JSON array."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

# Around the readers' depth limit (64), and far past it.
DEPTHS = (0, 1, 6, 62, 63, 64, 65, 200, 5_000, 30_000, 70_000)


def nested(depth: int, kind: str) -> Any:
    """A value `depth` levels of arrays or objects deep, built without recursion."""
    value: Any = 1
    for _ in range(depth):
        value = [value] if kind == "array" else {"a": value}
    return value


def nested_bytes(depth: int, kind: str) -> bytes:
    if kind == "array":
        return b"[" * depth + b"1" + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


texts = st.text(max_size=20) | st.builds(
    lambda unit, count: unit * count,
    st.sampled_from(["x", "é", "\\", '"', "{[", "\U0001f600", "\x01"]),
    st.integers(min_value=1, max_value=12_000),
)


@st.composite
def records(draw: st.DrawFn) -> bytes:
    """One generic record, as JSON bytes."""
    step_count = draw(st.sampled_from([1, 3, 149, 150, 151]))
    steps = [f"s{index}" for index in range(step_count)]
    if draw(st.booleans()):
        steps[draw(st.integers(0, step_count - 1))] = draw(texts)
    record: dict[str, Any] = {"problem": draw(st.text(min_size=1, max_size=30)), "steps": steps}
    if draw(st.booleans()):
        record["labels"] = [draw(st.sampled_from([-1, 0, 1, None]))] * step_count
    depth = draw(st.sampled_from(DEPTHS))
    if depth < 1_000:
        # Small enough for json.dumps's recursion: encoded the ordinary way.
        record["meta"] = {"deep": nested(depth, draw(st.sampled_from(["array", "object"])))}
        return json.dumps(record, ensure_ascii=draw(st.booleans())).encode()
    encoded = json.dumps(record).encode()
    deep = nested_bytes(depth, draw(st.sampled_from(["array", "object"])))
    return encoded[:-1] + b', "meta": {"deep": ' + deep + b"}}"


# Around the readers' limit on values per record (100,000), and past it.
WIDTHS = (99_990, 99_995, 99_996, 150_000)


@st.composite
def lines(draw: st.DrawFn) -> bytes:
    """A record, a line that is nothing but nesting, or a record of many small values."""
    kind = draw(st.integers(0, 5))
    if kind == 0:
        depth = draw(st.sampled_from(DEPTHS[1:]))
        return nested_bytes(depth, draw(st.sampled_from(["array", "object"])))
    if kind == 1:
        items = b",".join(
            [draw(st.sampled_from([b"0", b"{}", b"[]"]))] * draw(st.sampled_from(WIDTHS))
        )
        return b'{"problem": "p", "steps": ["s"], "meta": {"w": [%s]}}' % items
    return draw(records())


@st.composite
def import_files(draw: st.DrawFn, *, max_bytes: int) -> bytes:
    items = draw(st.lists(lines(), min_size=1, max_size=4))
    if draw(st.booleans()):
        content = b"\n".join(items) + b"\n"
    else:
        content = b"[" + b",\n".join(items) + b"]"
    mutation = draw(st.sampled_from(["none", "none", "cut", "insert", "replace"]))
    if mutation != "none" and content:
        at = draw(st.integers(0, len(content) - 1))
        if mutation == "cut":
            content = content[:at]
        else:
            blob = draw(st.sampled_from([b"[", b"{", b'"', b"\\", b"\n", b"\x00", b"\xff", b"]"]))
            skip = 1 if mutation == "replace" else 0
            content = content[:at] + blob * draw(st.integers(1, 3)) + content[at + skip :]
    return content[:max_bytes]
