"""Steplab's generic records -> chains.

`{"problem": str, "steps": [str] | str, "answer"?: str, "reference_answer"?: str,
"generator"?: str, "labels"?: [-1|0|1|null], "meta"?: {}}`. Steps given as one string are
split by the project's step-splitting rule (STEP_SPLITS). Unknown top-level fields (ids,
sources) are kept in meta, under the record's own meta keys.
"""

from __future__ import annotations

import re

from annotation.datasets.importers.fields import (
    JsonObject,
    RecordError,
    build_chain,
    extra_fields,
    field,
    mismatch,
    optional_text,
    ratings,
    require_object,
    require_text,
    step_texts,
)
from annotation.datasets.importers.records import ParsedChain, RecordAt

LABEL_SOURCE = "generic"
STEP_SPLITS = ("newline", "double_newline")

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# A paragraph break: a line break followed by one or more blank (or space-only) lines.
_PARAGRAPH_BREAK = re.compile(r"(?:\r\n|\r|\n)(?:[ \t]*(?:\r\n|\r|\n))+")

_KNOWN = ("problem", "steps", "answer", "reference_answer", "generator", "labels", "meta")


def parse_record(record: JsonObject, at: RecordAt, *, step_split: str = "newline") -> ParsedChain:
    if "label" in record and "labels" not in record:
        raise RecordError(
            "label: generic records carry per-step 'labels'; a single 'label' is "
            "ProcessBench's first-error index (import with the processbench format)"
        )
    problem = require_text(field(record, "problem"), "problem")
    steps = _steps(field(record, "steps"), step_split)
    labels = None
    if record.get("labels") is not None:
        labels = ratings(record["labels"], "labels", step_count=len(steps))
    meta = dict(require_object(record["meta"], "meta")) if record.get("meta") is not None else {}
    for key, value in extra_fields(record, _KNOWN).items():
        meta.setdefault(key, value)
    return build_chain(
        at=at,
        problem=problem,
        steps=steps,
        labels=labels,
        label_source=LABEL_SOURCE,
        answer=optional_text(record.get("answer"), "answer"),
        reference_answer=optional_text(record.get("reference_answer"), "reference_answer"),
        generator=optional_text(record.get("generator"), "generator"),
        meta=meta,
    )


def split_steps(text: str, step_split: str) -> list[str]:
    """Steps of a plain-text solution: non-blank lines ("newline") or paragraphs
    separated by blank lines ("double_newline"), each stripped.

    >>> split_steps("a = 1\\n\\n  b = 2  \\n", "newline")
    ['a = 1', 'b = 2']
    >>> split_steps("Let $x=1$.\\nSo $x+1=2$.\\n\\n# Answer\\n2", "double_newline")
    ['Let $x=1$.\\nSo $x+1=2$.', '# Answer\\n2']
    """
    if step_split not in STEP_SPLITS:
        raise ValueError(f"unknown step split {step_split!r}; expected one of {STEP_SPLITS}")
    separator = _LINE_BREAK if step_split == "newline" else _PARAGRAPH_BREAK
    return [part.strip() for part in separator.split(text) if part.strip()]


def _steps(value: object, step_split: str) -> tuple[str, ...]:
    if isinstance(value, str):
        steps = split_steps(value, step_split)
        if not steps:
            raise RecordError("steps: no steps (the text is blank)")
        return tuple(steps)
    if isinstance(value, list):
        return step_texts(value, "steps")
    raise mismatch("steps", "an array of strings or a string", value)
