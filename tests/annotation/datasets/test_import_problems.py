"""The problems format (issue 23): problems with reference answers and no chains, what a
sampling run draws chains for. Detected from the first record's keys, parsed record by
record, imported through the one import path (all or nothing, deduplicated by content
hash like a chain's problem), its bad records reported by line with a reason."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from annotation.datasets.importers import LineError, ParsedProblem, detect_format, iter_chains
from annotation.datasets.imports import ImportRejected, chain_import
from annotation.models import Chain, ImportBatch, Problem


def jsonl(*records: Any) -> bytes:
    return b"".join(
        (r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in records
    )


def test_a_file_of_problems_with_answers_and_no_steps_is_detected() -> None:
    assert detect_format(jsonl({"problem": "1+1?", "reference_answer": "2"})) == "problems"
    assert detect_format(jsonl({"problem": "1+1?", "answer": "2", "level": 1})) == "problems"
    # A record with steps stays a chain format.
    assert detect_format(jsonl({"problem": "1+1?", "steps": ["2"], "answer": "2"})) == "generic"


def test_each_record_becomes_a_problem_with_its_reference_answer() -> None:
    data = jsonl(
        {"problem": " What is 1+1? ", "reference_answer": " 2 "},
        {"problem": "Half of 3?", "answer": 1.5, "subject": "arithmetic"},
        {"problem": "Same?", "answer": "x", "reference_answer": "x"},
    )
    parsed = list(iter_chains(io.BytesIO(data), "problems"))
    assert parsed == [
        ParsedProblem(line=1, problem="What is 1+1?", reference_answer="2"),
        # A number is kept as its decimal.
        ParsedProblem(line=2, problem="Half of 3?", reference_answer="1.5"),
        ParsedProblem(line=3, problem="Same?", reference_answer="x"),
    ]


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (
            {"problem": "1+1?"},
            "reference_answer: missing (a problem needs a reference answer, as "
            "'reference_answer' or 'answer', to grade sampled chains against)",
        ),
        ({"problem": "1+1?", "answer": "  "}, "reference_answer: missing"),
        ({"problem": "", "answer": "2"}, "problem: empty"),
        ({"answer": "2"}, "problem: missing (expected a string)"),
        ({"problem": "1+1?", "answer": True}, "answer: expected a string or a number, got boolean"),
        (
            {"problem": "1+1?", "answer": "2", "reference_answer": "3"},
            "answer: '2' differs from reference_answer '3'; give one",
        ),
        ({"problem": "1+1?", "answer": "2", "steps": ["2"]}, "steps: a problems file holds"),
    ],
)
def test_a_bad_record_is_a_line_error_with_its_reason(record: dict[str, Any], reason: str) -> None:
    data = jsonl({"problem": "fine", "answer": "1"}, record)
    parsed = list(iter_chains(io.BytesIO(data), "problems"))
    assert isinstance(parsed[0], ParsedProblem)
    error = parsed[1]
    assert isinstance(error, LineError)
    assert error.line == 2
    assert error.reason.startswith(reason)


@pytest.mark.django_db
def test_an_import_creates_problems_only_and_skips_those_already_there(
    project: Any, tmp_path: Path
) -> None:
    # Given: a project that holds one of the problems, without a reference answer
    Problem.objects.create(project=project, text="Known?", content_hash=_hash("Known?"))
    path = tmp_path / "problems.jsonl"
    path.write_bytes(
        jsonl(
            {"problem": "What is 1+1?", "answer": "2"},
            {"problem": "Known?", "reference_answer": "yes"},
            {"problem": "What is 1+1?", "answer": "2"},
            {"problem": "What is 2+2?", "reference_answer": "4"},
        )
    )

    # When: the file is imported with the format detected
    result = chain_import(project=project, path=path)

    # Then: two new problems, two duplicates (one known, one repeated), no chain; the
    # known problem's empty reference answer is filled
    assert result.format == "problems"
    assert (result.problems_created, result.problems_duplicate) == (2, 2)
    assert (result.chains_created, result.steps_created) == (0, 0)
    assert not Chain.objects.exists()
    assert dict(Problem.objects.values_list("text", "reference_answer")) == {
        "What is 1+1?": "2",
        "What is 2+2?": "4",
        "Known?": "yes",
    }
    # ...and the same bytes again add nothing
    assert chain_import(project=project, path=path).already_imported


@pytest.mark.django_db
def test_a_bad_record_rejects_the_whole_file_naming_its_line(project: Any) -> None:
    data = jsonl({"problem": "1+1?", "answer": "2"}, {"problem": "No answer here"})
    with pytest.raises(ImportRejected) as rejected:
        chain_import(project=project, path=io.BytesIO(data), fmt="problems")
    assert rejected.value.summary().startswith(
        "1 bad line; line 2: reference_answer: missing (a problem needs a reference answer"
    )
    assert not Problem.objects.exists()
    assert not ImportBatch.objects.exists()


def _hash(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()
