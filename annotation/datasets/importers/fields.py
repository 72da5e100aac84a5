"""Field checks shared by the format parsers.

Every check raises `RecordError` whose message starts with the field's path in the source
record ("label.steps[3].completions[0].rating: ..."), so a lead can find the bad spot in a
100,000-line file from the import report alone.

A key the record lacks is read with `field` as MISSING, not as None, so the message says
"missing" where the file has no such key and "got null" only where it says `null`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from annotation.datasets.importers.records import ParsedChain, RecordAt

JsonObject = dict[str, Any]

RATINGS = (-1, 0, 1)


class RecordError(ValueError):
    """A record that cannot become a chain; `str(error)` is the LineError reason."""


class _Missing:
    """The value of a key the record does not have (see `field`)."""

    def __repr__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()


def field(record: Mapping[str, Any], key: str) -> Any:
    """`record[key]`, or MISSING when the record has no such key."""
    return record.get(key, MISSING)


def mismatch(path: str, expected: str, value: object) -> RecordError:
    """The error for a value of the wrong type: "problem: missing (expected a string)"
    for an absent key, "problem: expected a string, got null" for a present one."""
    if value is MISSING:
        return RecordError(f"{path}: missing (expected {expected})")
    return RecordError(f"{path}: expected {expected}, got {json_type(value)}")


def json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for messages written to people who
    wrote JSON, not Python."""
    if value is MISSING:
        return "nothing (the key is missing)"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def shown_value(value: object) -> str:
    """A scalar as JSON spells it (`true`, `2`, `1.5`), any other value by its type."""
    if isinstance(value, bool | int | float):
        return json.dumps(value)
    return json_type(value)


def require_object(value: object, path: str) -> JsonObject:
    if not isinstance(value, dict):
        raise mismatch(path, "an object", value)
    return value


def require_list(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise mismatch(path, "an array", value)
    return value


def require_text(value: object, path: str) -> str:
    """A mandatory text such as the problem: a string, non-empty once stripped."""
    if not isinstance(value, str):
        raise mismatch(path, "a string", value)
    text = value.strip()
    if not text:
        raise RecordError(f"{path}: empty")
    return text


def optional_text(value: object, path: str) -> str:
    """An optional text such as an answer: absent or null is ""; anything but a string is
    an error, since silently str()-ing a number would change "1.50" into "1.5"."""
    if value is None or value is MISSING:
        return ""
    if not isinstance(value, str):
        raise RecordError(f"{path}: expected a string or null, got {json_type(value)}")
    return value.strip()


def step_text(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise mismatch(path, "a string", value)
    text = value.strip()
    if not text:
        raise RecordError(f"{path}: empty step")
    return text


def step_texts(value: object, path: str) -> tuple[str, ...]:
    """A non-empty array of non-empty step strings."""
    items = require_list(value, path)
    if not items:
        raise RecordError(f"{path}: no steps (empty array)")
    return tuple(step_text(item, f"{path}[{index}]") for index, item in enumerate(items))


def rating(value: object, path: str) -> int | None:
    """A PRM800K-scale rating: -1, 0, 1, or null for "not rated".

    Booleans are refused although Python counts them as ints: `true` in a ratings array
    is almost surely a TRL-style label put in the wrong format, and would read as +1."""
    if value is None or value is MISSING:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value in RATINGS:
        return value
    raise RecordError(f"{path}: {shown_value(value)} is not a rating (expected -1, 0, 1 or null)")


def ratings(value: object, path: str, *, step_count: int) -> tuple[int | None, ...]:
    items = require_list(value, path)
    check_label_count(len(items), step_count, path)
    return tuple(rating(item, f"{path}[{index}]") for index, item in enumerate(items))


def check_label_count(label_count: int, step_count: int, path: str) -> None:
    if label_count != step_count:
        raise RecordError(f"{path}: {label_count} labels for {step_count} steps")


def extra_fields(record: Mapping[str, Any], known: Iterable[str]) -> JsonObject:
    """Top-level fields a format does not define (ids, sources...), kept in meta so an
    import loses nothing a lead put in the file."""
    known_set = set(known)
    return {key: value for key, value in record.items() if key not in known_set}


def build_chain(
    *,
    at: RecordAt,
    problem: str,
    steps: Sequence[str],
    labels: Sequence[int | None] | None,
    label_source: str,
    answer: str = "",
    reference_answer: str = "",
    generator: str = "",
    meta: JsonObject | None = None,
) -> ParsedChain:
    """Assemble the chain; a labels array with no rating in it means "unlabeled", so it
    becomes None, and then no label source is claimed either."""
    steps = tuple(steps)
    if labels is not None:
        labels = tuple(labels)
        check_label_count(len(labels), len(steps), "labels")
        if all(label is None for label in labels):
            labels = None
    return ParsedChain(
        line=at.line,
        record=at.record,
        problem=problem,
        steps=steps,
        answer=answer,
        reference_answer=reference_answer,
        generator=generator,
        labels=labels,
        label_source=label_source if labels is not None else "",
        meta=meta or {},
    )
