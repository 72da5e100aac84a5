"""Problems with reference answers and no chains -> problems (issue 23): what a sampling run
draws chains for. `{"problem": str, "reference_answer" | "answer": str | number}`; other
fields (a dataset's id, subject, level, its own worked solution) are ignored, since a
problem keeps its text and reference answer only. A record with steps is a chain, not a
problem: it belongs to a chain format.
"""

from __future__ import annotations

from decimal import Decimal

from annotation.datasets.importers.fields import (
    MISSING,
    JsonObject,
    RecordError,
    field,
    json_type,
    require_text,
)
from annotation.datasets.importers.records import ParsedProblem, RecordAt

_ANSWER_KEYS = ("reference_answer", "answer")


def parse_record(record: JsonObject, at: RecordAt) -> ParsedProblem:
    if "steps" in record or "completions" in record:
        raise RecordError(
            "steps: a problems file holds no chains; import chains with their own format "
            "(generic, processbench...)"
        )
    problem = require_text(field(record, "problem"), "problem")
    answers = {key: _answer(record[key], key) for key in _ANSWER_KEYS if key in record}
    given = {key: text for key, text in answers.items() if text}
    if not given:
        raise RecordError(
            "reference_answer: missing (a problem needs a reference answer, as "
            "'reference_answer' or 'answer', to grade sampled chains against)"
        )
    if len(set(given.values())) > 1:
        raise RecordError(
            f"answer: {given['answer']!r} differs from reference_answer "
            f"{given['reference_answer']!r}; give one"
        )
    return ParsedProblem(
        line=at.line, record=at.record, problem=problem, reference_answer=next(iter(given.values()))
    )


def _answer(value: object, path: str) -> str:
    """A reference answer: a string, or a number (GSM8K-style files write them bare), as
    its shortest decimal; null is none."""
    if value is None or value is MISSING:
        return ""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        return str(value)
    raise RecordError(f"{path}: expected a string or a number, got {json_type(value)}")
