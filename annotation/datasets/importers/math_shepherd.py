"""Math-Shepherd records -> chains with Monte-Carlo (+/-) step labels.

`input` is one string: the question, then "Step 1: ... ки\\nStep 2: ... ки" where the
tag "ки" ends every step. `label` is the same string with "+" or "-" in place of each
tag. The question ends where the first step's "Step 1:" begins (the last "Step 1:"
before the first tag, should a question quote the phrase itself). The "Step k:" prefix
is the format's numbering, not content, so it is dropped from step k; the rest of the
step is kept verbatim. The answer is what follows "The answer is:" in the last step.
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
)
from annotation.datasets.importers.records import ParsedChain, RecordAt

LABEL_SOURCE = "math_shepherd"
STEP_TAG = "ки"
FIRST_STEP = "Step 1:"
ANSWER_MARKER = "The answer is:"
_TAG_LABELS = {"+": 1, "-": -1}

_KNOWN = ("input", "label")


def parse_record(record: JsonObject, at: RecordAt) -> ParsedChain:
    text = field(record, "input")
    if not isinstance(text, str):
        raise mismatch("input", "a string", text)
    segments = text.split(STEP_TAG)
    problem, steps = _split(segments)
    labels = None
    if record.get("label") is not None:
        labels = _labels(record["label"], segments)
    return build_chain(
        at=at,
        problem=problem,
        steps=steps,
        labels=labels,
        label_source=LABEL_SOURCE,
        answer=_final_answer(steps[-1]),
        meta=extra_fields(record, _KNOWN),
    )


def _split(segments: list[str]) -> tuple[str, list[str]]:
    """Question and steps from the text between tags (the last segment follows the
    last tag and must be blank)."""
    if len(segments) < 2:
        raise RecordError(f"input: no '{STEP_TAG}' step tags")
    if segments[-1].strip():
        raise RecordError(f"input: text after the last '{STEP_TAG}' step tag")
    head = segments[0]
    start = head.rfind(FIRST_STEP)
    if start < 0:
        raise RecordError(
            f"input: no '{FIRST_STEP}' before the first '{STEP_TAG}' tag, "
            "so the question cannot be told from the first step"
        )
    problem = head[:start].strip()
    if not problem:
        raise RecordError(f"input: empty question before '{FIRST_STEP}'")
    raw_steps = [head[start:], *segments[1:-1]]
    return problem, [_step(raw, number) for number, raw in enumerate(raw_steps, start=1)]


def _step(raw: str, number: int) -> str:
    text = raw.strip()
    prefix = re.match(rf"Step\s*{number}\s*:\s*", text)
    if prefix:
        text = text[prefix.end() :]
    if not text:
        raise RecordError(f"input: step {number} is empty")
    return text


def _labels(label: object, segments: list[str]) -> tuple[int, ...]:
    """Read the +/- that stand where `input` has its tags; any other difference between
    the two strings means they do not describe the same chain."""
    if not isinstance(label, str):
        raise mismatch("label", "a string", label)
    labels = []
    position = 0
    for number, segment in enumerate(segments[:-1], start=1):
        if not label.startswith(segment, position):
            raise RecordError(f"label: text differs from input before the tag of step {number}")
        position += len(segment)
        mark = label[position : position + 1]
        if mark not in _TAG_LABELS:
            raise RecordError(f"label: expected '+' or '-' for step {number}, got {mark!r}")
        labels.append(_TAG_LABELS[mark])
        position += 1
    if label[position:] != segments[-1]:
        raise RecordError("label: text differs from input after the last step")
    return tuple(labels)


def _final_answer(last_step: str) -> str:
    marker = last_step.rfind(ANSWER_MARKER)
    return last_step[marker + len(ANSWER_MARKER) :].strip() if marker >= 0 else ""
