"""TRL stepwise-supervision records (what `trl.PRMTrainer` reads) -> chains.

`{"prompt": str, "completions": [str], "labels": [bool]}`: true is +1, false is -1.
`labels` may be absent (unlabeled chains); a null entry marks one unrated step, an
extension of TRL's shape that our own exports of partly-labeled chains need. Integers are
refused: 0 would be ambiguous between TRL's false and Steplab's neutral rating.
"""

from __future__ import annotations

from annotation.datasets.importers.fields import (
    JsonObject,
    RecordError,
    build_chain,
    check_label_count,
    extra_fields,
    field,
    require_list,
    require_text,
    shown_value,
    step_texts,
)
from annotation.datasets.importers.records import ParsedChain, RecordAt

LABEL_SOURCE = "trl"

_KNOWN = ("prompt", "completions", "labels")


def parse_record(record: JsonObject, at: RecordAt) -> ParsedChain:
    prompt = field(record, "prompt")
    if isinstance(prompt, list):
        raise RecordError("prompt: conversational prompts (a list of messages) are not supported")
    problem = require_text(prompt, "prompt")
    steps = step_texts(field(record, "completions"), "completions")
    labels = None
    if record.get("labels") is not None:
        labels = _labels(record["labels"], len(steps))
    return build_chain(
        at=at,
        problem=problem,
        steps=steps,
        labels=labels,
        label_source=LABEL_SOURCE,
        meta=extra_fields(record, _KNOWN),
    )


def _labels(value: object, step_count: int) -> tuple[int | None, ...]:
    items = require_list(value, "labels")
    check_label_count(len(items), step_count, "labels")
    return tuple(_label(item, f"labels[{index}]") for index, item in enumerate(items))


def _label(value: object, path: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, bool):
        raise RecordError(f"{path}: expected true, false or null, got {shown_value(value)}")
    return 1 if value else -1
