"""ProcessBench records (QwenLM) -> chains with first-error labels.

`label` is the 0-based index of the earliest wrong step, or -1 when no step is wrong.
The experts stopped at the first error, so the steps after it were never judged: they
come in unlabeled (None), not as correct. Steps before it are +1, the step at it is -1.
"""

from __future__ import annotations

from annotation.datasets.importers.fields import (
    JsonObject,
    RecordError,
    build_chain,
    extra_fields,
    field,
    mismatch,
    optional_text,
    require_text,
    step_texts,
)
from annotation.datasets.importers.records import ParsedChain, RecordAt

LABEL_SOURCE = "processbench"
NO_ERROR = -1

_KNOWN = ("id", "generator", "problem", "steps", "final_answer_correct", "label")


def parse_record(record: JsonObject, at: RecordAt) -> ParsedChain:
    problem = require_text(field(record, "problem"), "problem")
    steps = step_texts(field(record, "steps"), "steps")
    meta = extra_fields(record, _KNOWN)
    if "id" in record:
        meta["id"] = record["id"]
    if "final_answer_correct" in record:
        meta["final_answer_correct"] = _final_answer_correct(record["final_answer_correct"])
    return build_chain(
        at=at,
        problem=problem,
        steps=steps,
        labels=first_error_labels(field(record, "label"), len(steps)),
        label_source=LABEL_SOURCE,
        generator=optional_text(record.get("generator"), "generator"),
        meta=meta,
    )


def first_error_labels(label: object, step_count: int) -> tuple[int | None, ...]:
    """Per-step ratings from a first-error index.

    >>> first_error_labels(1, 4)
    (1, -1, None, None)
    >>> first_error_labels(-1, 2)
    (1, 1)
    """
    if not isinstance(label, int) or isinstance(label, bool):
        raise mismatch("label", "an integer step index", label)
    if label == NO_ERROR:
        return (1,) * step_count
    if not 0 <= label < step_count:
        raise RecordError(
            f"label: {label} is out of range for {step_count} steps "
            f"(expected -1 or 0..{step_count - 1})"
        )
    return (1,) * label + (-1,) + (None,) * (step_count - label - 1)


def _final_answer_correct(value: object) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise mismatch("final_answer_correct", "true or false", value)
    return value
