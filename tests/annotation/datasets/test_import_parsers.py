"""Import parsers: format detection and streaming chains out of each format, on our own
fixtures (every quirk of the real files, reproduced small), on the real public samples
beside the repository, and on broken input. Pure unit tests: no database."""

from __future__ import annotations

import doctest
import io
import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from annotation.datasets.importers import (
    FORMATS,
    MAX_JSON_DEPTH,
    MAX_JSON_VALUES,
    MAX_LINE_BYTES,
    FormatDetectionError,
    LineError,
    ParsedChain,
    content_hash,
    detect_format,
    generic,
    iter_chains,
    processbench,
    records,
)
from annotation.datasets.importers.reading import (
    TOO_DEEP,
    TOO_MANY_VALUES,
    JsonGauge,
    iter_json_records,
    json_shape_problem,
    unstorable_string,
)
from annotation.datasets.importers.records import RecordAt

REPO_ROOT = Path(__file__).resolve().parents[3]
FIXTURES = REPO_ROOT / "tests" / "fixtures" / "imports"
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

FIXTURE_FORMATS = {
    "prm800k_quirks.jsonl": "prm800k",
    "processbench_sample.json": "processbench",
    "trl_sample.jsonl": "trl",
    "math_shepherd_sample.jsonl": "math_shepherd",
    "generic_sample.jsonl": "generic",
}

# file, format, records: every record of these must parse.
REAL_FILES = [
    ("prm800k/real_records.jsonl", "prm800k", 16),
    ("processbench/gsm8k.json", "processbench", 400),
    ("processbench/math.json", "processbench", 1000),
    ("math_shepherd/samples.jsonl", "math_shepherd", 7),
]


def real_data() -> Path:
    """The real samples in ../shared/data: CI has them, so there a missing folder fails."""
    if not SHARED_DATA.is_dir():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{SHARED_DATA} is missing and CI=true")
        pytest.skip(f"{SHARED_DATA} not present")
    return SHARED_DATA


def parse_bytes(data: bytes, fmt: str, **kwargs: str) -> list[ParsedChain | LineError]:
    return list(iter_chains(io.BytesIO(data), fmt, **kwargs))


def parse_file(path: Path, fmt: str) -> list[ParsedChain | LineError]:
    with path.open("rb") as stream:
        return list(iter_chains(stream, fmt))


def jsonl(*records: object) -> bytes:
    return b"".join(json.dumps(record).encode() + b"\n" for record in records)


def only_chains(results: list[ParsedChain | LineError]) -> list[ParsedChain]:
    errors = [item for item in results if isinstance(item, LineError)]
    assert errors == []
    return [item for item in results if isinstance(item, ParsedChain)]


def errors_of(results: list[ParsedChain | LineError]) -> list[tuple[int | str | None, str]]:
    """(line, reason) per error: the line number in JSON Lines, and in a JSON array how
    the report names the record ("record 2 (line 1)")."""
    return [
        (item.line if item.record is None else item.where, item.reason)
        for item in results
        if isinstance(item, LineError)
    ]


def places(results: list[ParsedChain | LineError]) -> list[int | str | None]:
    """Where each chain was read, named as ``errors_of`` names an error's place."""
    return [
        item.line if item.record is None else str(item.at)
        for item in results
        if isinstance(item, ParsedChain)
    ]


GOOD = {"problem": "What is 1 + 1?", "steps": ["1 + 1 = 2.", "The answer is 2."]}


# --- detection ------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "fmt"), FIXTURE_FORMATS.items())
def test_detect_format_recognises_each_fixture(name: str, fmt: str) -> None:
    head = (FIXTURES / name).read_bytes()[:65536]

    assert detect_format(head) == fmt


@pytest.mark.parametrize(("name", "fmt", "_count"), REAL_FILES)
def test_detect_format_recognises_each_real_file(name: str, fmt: str, _count: int) -> None:
    head = (real_data() / name).read_bytes()[:65536]

    assert detect_format(head) == fmt


def test_detect_format_refuses_math_aps_with_a_reason() -> None:
    head = (real_data() / "math_aps" / "samples.jsonl").read_bytes()[:65536]

    with pytest.raises(FormatDetectionError, match="MATH-APS"):
        detect_format(head)


def test_detect_format_on_garbage_says_what_was_expected() -> None:
    with pytest.raises(FormatDetectionError) as caught:
        detect_format(b"hello, this is a text file\n")

    message = str(caught.value)
    assert "does not start with JSON records" in message
    assert "JSON Lines or a JSON array" in message


def test_detect_format_on_unknown_keys_lists_keys_seen_and_formats() -> None:
    with pytest.raises(FormatDetectionError) as caught:
        detect_format(b'{"text": "hi", "score": 3}\n')

    message = str(caught.value)
    assert "(score, text)" in message
    for fmt in FORMATS:
        assert fmt in message


@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"", "empty"),
        (b"  \n\n", "empty"),
        (b"[]", "empty JSON array"),
        (b'["a", "b"]', "JSON string, not an object"),
        (b"42\n", "JSON number, not an object"),
        (b'{"input": "no tags here", "label": "x"}', "no 'ки' step tags"),
    ],
)
def test_detect_format_errors(head: bytes, expected: str) -> None:
    with pytest.raises(FormatDetectionError, match=expected):
        detect_format(head)


def test_detect_format_reads_keys_of_a_first_record_cut_by_the_head() -> None:
    line = json.dumps({"problem": "p", "steps": ["x" * 100_000]}).encode()

    assert detect_format(line[:65536]) == "generic"


def test_detect_format_knows_prm800k_from_keys_before_a_long_question() -> None:
    head = (FIXTURES / "prm800k_quirks.jsonl").read_bytes()[:200]

    assert b'"label"' not in head
    assert detect_format(head) == "prm800k"


def test_detect_format_skips_bom_and_blank_lines() -> None:
    head = b"\xef\xbb\xbf\n\n" + jsonl({"prompt": "p", "completions": ["a"]})

    assert detect_format(head) == "trl"


def test_detect_format_tells_processbench_jsonl_from_generic() -> None:
    record = {"problem": "p", "steps": ["a"], "label": -1}

    assert detect_format(jsonl(record)) == "processbench"
    assert detect_format(jsonl(GOOD)) == "generic"


# --- PRM800K --------------------------------------------------------------------------


@pytest.fixture
def prm800k_chains() -> dict[int, ParsedChain]:
    chains = only_chains(parse_file(FIXTURES / "prm800k_quirks.jsonl", "prm800k"))
    return {chain.line: chain for chain in chains}


def test_prm800k_follows_human_completion_where_none_was_chosen(
    prm800k_chains: dict[int, ParsedChain],
) -> None:
    chain = prm800k_chains[1]

    assert chain.problem == "What is $3 \\cdot 4$?"
    assert chain.steps[1] == "$3 \\cdot 4 = 4 + 4 + 4 = 12$."
    assert chain.labels == (1, None, 1)  # the human step's rating is null in the real files
    assert chain.label_source == "prm800k"
    assert chain.answer == "12"
    assert chain.reference_answer == "12"
    assert chain.meta["human_steps"] == [1]
    assert chain.meta["finish_reason"] == "solution"
    assert chain.meta["generation"] is None
    assert chain.meta["alternatives"] == [
        {"step": 1, "text": "$3 \\cdot 4 = 7$.", "rating": -1},
        {"step": 1, "text": "$3 + 4 = 7$, so that is the product.", "rating": -1},
        {"step": 2, "text": "# Answer\n\n7", "rating": -1, "flagged": True},
    ]


def test_prm800k_found_error_follows_the_first_completion_at_the_last_step(
    prm800k_chains: dict[int, ParsedChain],
) -> None:
    chain = prm800k_chains[3]  # line 2 is blank

    assert chain.steps == (
        "Let $x$ be the smaller number.",
        "Then $x + (x + 2) = 10$, so $2x = 8$.",
        "So $x = 5$.",
    )
    assert chain.labels == (1, 0, -1)
    assert chain.answer == ""  # labeling stopped before the pre-generated answer
    assert chain.meta["pre_generated_answer"] == "5"
    assert chain.meta["pre_generated_step_count"] == 4
    assert chain.meta["unchosen_steps"] == [2]
    assert chain.meta["alternatives"] == [{"step": 2, "text": "So $x = 4$.", "rating": 1}]
    assert chain.meta["ground_truth_solution"].startswith("The numbers are")


def test_prm800k_step_without_completions_ends_the_chain(
    prm800k_chains: dict[int, ParsedChain],
) -> None:
    chain = prm800k_chains[4]

    assert chain.steps == ("Squares of real numbers are never negative.",)
    assert chain.labels == (1,)
    assert chain.meta["finish_reason"] == "give_up"


def test_prm800k_line_without_ratings_is_unlabeled(
    prm800k_chains: dict[int, ParsedChain],
) -> None:
    chain = prm800k_chains[5]

    assert chain.labels is None
    assert chain.label_source == ""
    assert chain.answer == "7"


def test_prm800k_accepts_human_completion_as_plain_string(
    prm800k_chains: dict[int, ParsedChain],
) -> None:
    chain = prm800k_chains[6]

    assert chain.steps[0] == "$2^5 = 2 \\cdot 2 \\cdot 2 \\cdot 2 \\cdot 2 = 32$."
    assert chain.labels == (None, 1)
    assert chain.meta["human_steps"] == [0]


def _prm800k_line(steps: object, **question: object) -> dict[str, object]:
    return {
        "question": {"problem": "p", **question},
        "label": {"steps": steps, "finish_reason": "solution"},
    }


def test_prm800k_steps_after_a_dead_end_are_counted_not_followed() -> None:
    followed = {"completions": [{"text": "a", "rating": 1}], "chosen_completion": 0}
    dead_end = {"completions": None, "human_completion": None, "chosen_completion": None}
    record = _prm800k_line([followed, dead_end, followed, followed])

    (chain,) = only_chains(parse_bytes(jsonl(record), "prm800k"))

    assert chain.steps == ("a",)
    assert chain.meta["dropped_steps"] == 2


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (
            _prm800k_line([{"completions": [{"text": "a", "rating": 2}], "chosen_completion": 0}]),
            "label.steps[0].completions[0].rating: 2 is not a rating (expected -1, 0, 1 or null)",
        ),
        (
            _prm800k_line([{"completions": [{"text": "a", "rating": 1}], "chosen_completion": 3}]),
            "label.steps[0].chosen_completion: 3 is out of range (1 completions)",
        ),
        (
            _prm800k_line([{"completions": [{"text": " ", "rating": 1}], "chosen_completion": 0}]),
            "label.steps[0].completions[0].text: empty step",
        ),
        (_prm800k_line([]), "label.steps: no step to follow (finish_reason: solution)"),
        (_prm800k_line("steps"), "label.steps: expected an array, got string"),
        ({"question": {"problem": ""}, "label": {"steps": []}}, "question.problem: empty"),
        ({"question": {"problem": "p"}, "label": None}, "label: expected an object, got null"),
    ],
)
def test_prm800k_rejects_bad_lines_naming_the_field(record: object, reason: str) -> None:
    assert errors_of(parse_bytes(jsonl(record), "prm800k")) == [(1, reason)]


# --- ProcessBench ---------------------------------------------------------------------


def test_processbench_labels_steps_up_to_the_first_error_only() -> None:
    chains = only_chains(parse_file(FIXTURES / "processbench_sample.json", "processbench"))

    # Each record by its index in the array (from 1) and the line it starts on.
    assert [str(chain.at) for chain in chains] == [
        "record 1 (line 2)",
        "record 2 (line 14)",
        "record 3 (line 27)",
    ]
    no_error, second_wrong, first_wrong = chains
    assert no_error.labels == (1, 1, 1)
    assert second_wrong.labels == (1, -1, None, None)  # after the first error: unlabeled
    assert first_wrong.labels == (-1, None)
    assert second_wrong.steps[-1] == "The answer is \\(\\boxed{26}\\)."
    assert second_wrong.generator == "tiny-model-b"
    assert second_wrong.label_source == "processbench"
    assert second_wrong.meta == {"id": "own-1", "final_answer_correct": False}


def test_processbench_is_accepted_as_json_lines_too() -> None:
    records_ = json.loads((FIXTURES / "processbench_sample.json").read_text())

    chains = only_chains(parse_bytes(jsonl(*records_), "processbench"))

    assert [chain.labels for chain in chains] == [(1, 1, 1), (1, -1, None, None), (-1, None)]


@pytest.mark.parametrize(
    ("label", "reason"),
    [
        (2, "label: 2 is out of range for 2 steps (expected -1 or 0..1)"),
        (-2, "label: -2 is out of range for 2 steps (expected -1 or 0..1)"),
        (True, "label: expected an integer step index, got boolean"),
        (None, "label: expected an integer step index, got null"),
    ],
)
def test_processbench_rejects_a_bad_label(label: object, reason: str) -> None:
    record = {**GOOD, "label": label}

    assert errors_of(parse_bytes(jsonl(record), "processbench")) == [(1, reason)]


def test_processbench_array_stops_at_a_syntax_error_with_the_record_index() -> None:
    data = b'[{"problem": "p", "steps": ["a"], "label": -1},\n {"problem": "q", "steps": [}]'

    results = parse_bytes(data, "processbench")

    assert len(results) == 2
    good, error = results
    assert isinstance(good, ParsedChain)
    assert isinstance(error, LineError)
    assert (error.record, error.line, error.where) == (2, 2, "record 2 (line 2)")
    assert error.reason.startswith("invalid JSON: ")
    assert error.reason.endswith("the rest of the JSON array cannot be read")


def test_json_array_item_that_is_not_an_object_is_reported_and_skipped() -> None:
    data = json.dumps([GOOD, [1, 2], GOOD]).encode()

    results = parse_bytes(data, "generic")

    assert errors_of(results) == [("record 2 (line 1)", "expected a JSON object, got array")]
    assert places(results) == ["record 1 (line 1)", "record 3 (line 1)"]


def test_json_array_record_over_the_size_limit_stops_the_file() -> None:
    huge = {"problem": "x" * 300_000, "steps": ["a"]}
    data = json.dumps([GOOD, huge, GOOD]).encode()

    results = list(iter_json_records(io.BytesIO(data), max_line_bytes=1000))

    assert results[0] == (RecordAt(line=1, record=1), GOOD)
    assert results[1:] == [
        LineError(
            1,
            "record longer than 1000 bytes; the rest of the JSON array cannot be read",
            record=2,
        )
    ]


# --- TRL ------------------------------------------------------------------------------


def test_trl_maps_true_false_to_plus_minus_one_and_missing_labels_to_none() -> None:
    chains = only_chains(parse_file(FIXTURES / "trl_sample.jsonl", "trl"))

    assert [chain.labels for chain in chains] == [(1, 1), (-1, -1), None]
    assert chains[0].problem == "What is 6 * 7?"
    assert chains[0].steps == ("6 * 7 = 42.", "The answer is 42.")
    assert chains[0].label_source == "trl"
    assert chains[2].label_source == ""


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (
            {"prompt": "p", "completions": ["a", "b"], "labels": [1, 0]},
            "labels[0]: expected true, false or null, got 1",
        ),
        (
            {"prompt": "p", "completions": ["a", "b"], "labels": [True]},
            "labels: 1 labels for 2 steps",
        ),
        (
            {"prompt": [{"role": "user", "content": "p"}], "completions": ["a"]},
            "prompt: conversational prompts (a list of messages) are not supported",
        ),
        ({"prompt": "p", "completions": []}, "completions: no steps (empty array)"),
    ],
)
def test_trl_rejects_bad_records(record: object, reason: str) -> None:
    assert errors_of(parse_bytes(jsonl(record), "trl")) == [(1, reason)]


# --- Math-Shepherd --------------------------------------------------------------------


def test_math_shepherd_splits_question_from_tagged_steps() -> None:
    first, quoted = only_chains(
        parse_file(FIXTURES / "math_shepherd_sample.jsonl", "math_shepherd")
    )

    assert first.problem == "Ann reads 12 pages a day. How many pages does she read in 5 days?"
    assert first.steps == ("She reads 12 * 5 = <<12*5=60>>60 pages.", "The answer is: 60")
    assert first.labels == (1, 1)
    assert first.answer == "60"
    assert first.label_source == "math_shepherd"
    assert first.meta == {"task": "GSM8K"}
    # The question itself quotes "Step 1:"; the question ends at the last one.
    assert quoted.problem.endswith(
        '"Step 1: mix 2 cups of flour". How many cups of flour are in 3 batches?'
    )
    assert quoted.steps[0] == "Each batch uses 2 cups."
    assert quoted.labels == (1, -1)
    assert quoted.answer == "5"


TAGGED = "Q? Step 1: a ки"


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        (
            {"input": TAGGED, "label": "Q? Step 1: a x"},
            "label: expected '+' or '-' for step 1, got 'x'",
        ),
        (
            {"input": TAGGED, "label": "Q! Step 1: a +"},
            "label: text differs from input before the tag of step 1",
        ),
        (
            {"input": TAGGED, "label": "Q? Step 1: a +\n"},
            "label: text differs from input after the last step",
        ),
        ({"input": "Q? Step 1: a", "label": "Q? Step 1: a"}, "input: no 'ки' step tags"),
        (
            {"input": "Q? First: a ки"},
            "input: no 'Step 1:' before the first 'ки' tag, "
            "so the question cannot be told from the first step",
        ),
        ({"input": TAGGED + "\nStep 2:  ки"}, "input: step 2 is empty"),
        ({"input": TAGGED + " and more"}, "input: text after the last 'ки' step tag"),
        ({"input": " Step 1: a ки"}, "input: empty question before 'Step 1:'"),
    ],
)
def test_math_shepherd_rejects_bad_records(record: object, reason: str) -> None:
    assert errors_of(parse_bytes(jsonl(record), "math_shepherd")) == [(1, reason)]


# --- generic --------------------------------------------------------------------------


def test_generic_reads_every_optional_field_and_keeps_text_verbatim() -> None:
    listed, split, markup = only_chains(parse_file(FIXTURES / "generic_sample.jsonl", "generic"))

    assert listed.problem == "Solve $2x + 1 = 7$."  # surrounding whitespace stripped
    assert listed.steps == ("Subtract $1$: $2x = 6$.", "Divide by $2$: $x = 3$.")
    assert listed.labels == (1, None)
    assert listed.label_source == "generic"
    assert (listed.answer, listed.reference_answer, listed.generator) == ("3", "3", "tiny-model-a")
    assert listed.meta == {"source": "unit-fixture", "id": "g-1"}
    assert split.steps == ("The gcd of $6$ and $8$ is $2$.", "Divide both by $2$: $\\frac{3}{4}$.")
    assert split.labels is None
    assert markup.problem == "Is <b>this</b> bold?"
    assert markup.steps == ("<script>alert(1)</script> is text, not markup.", "&amp; stays &amp;.")
    assert markup.labels == (0, -1)


def test_generic_string_steps_follow_the_step_split_rule() -> None:
    record = {"problem": "p", "steps": "Line one\nstill one\n\n  \nLine two\r\n\r\nLine three"}

    (by_line,) = only_chains(parse_bytes(jsonl(record), "generic"))
    (by_paragraph,) = only_chains(
        parse_bytes(jsonl(record), "generic", step_split="double_newline")
    )

    assert by_line.steps == ("Line one", "still one", "Line two", "Line three")
    assert by_paragraph.steps == ("Line one\nstill one", "Line two", "Line three")


def test_generic_labels_all_null_mean_unlabeled() -> None:
    (chain,) = only_chains(parse_bytes(jsonl({**GOOD, "labels": [None, None]}), "generic"))

    assert chain.labels is None
    assert chain.label_source == ""


def test_generic_refuses_processbench_style_label_with_a_hint() -> None:
    results = parse_bytes(jsonl({**GOOD, "label": 1}), "generic")

    assert "import with the processbench format" in errors_of(results)[0][1]


# --- broken input, JSON Lines ---------------------------------------------------------


def test_bad_lines_are_reported_with_line_numbers_and_parsing_goes_on() -> None:
    good = json.dumps(GOOD).encode()
    lines = [
        good,  # 1
        good[:25],  # 2: truncated
        json.dumps({"problem": "p", "steps": 5}).encode(),  # 3
        json.dumps({"problem": "p", "steps": ["a", 7]}).encode(),  # 4
        json.dumps({"problem": "p", "steps": []}).encode(),  # 5
        json.dumps({"problem": "p", "steps": ["a", "  \n "]}).encode(),  # 6
        b'{"problem": "caf\xe9", "steps": ["a"]}',  # 7: Latin-1, not UTF-8
        json.dumps({**GOOD, "labels": [1]}).encode(),  # 8
        json.dumps({**GOOD, "labels": [1, 2]}).encode(),  # 9
        json.dumps({**GOOD, "labels": [True, 1]}).encode(),  # 10
        json.dumps({"problem": "  ", "steps": ["a"]}).encode(),  # 11
        json.dumps({"problem": 3, "steps": ["a"]}).encode(),  # 12
        json.dumps([GOOD]).encode(),  # 13
        b"",  # 14: blank, skipped silently
        json.dumps({**GOOD, "answer": 2}).encode(),  # 15
        json.dumps({**GOOD, "meta": []}).encode(),  # 16
        b'{"problem": "p", "steps": ["a"], "labels": [NaN]}',  # 17
        good,  # 18
    ]

    results = parse_bytes(b"\n".join(lines) + b"\n", "generic")

    assert errors_of(results) == [
        (2, "invalid JSON: Unterminated string starting at (col 13)"),
        (3, "steps: expected an array of strings or a string, got number"),
        (4, "steps[1]: expected a string, got number"),
        (5, "steps: no steps (empty array)"),
        (6, "steps[1]: empty step"),
        (7, "not valid UTF-8 at byte 17"),
        (8, "labels: 1 labels for 2 steps"),
        (9, "labels[1]: 2 is not a rating (expected -1, 0, 1 or null)"),
        (10, "labels[0]: true is not a rating (expected -1, 0, 1 or null)"),
        (11, "problem: empty"),
        (12, "problem: expected a string, got number"),
        (13, "expected a JSON object, got array"),
        (15, "answer: expected a string or null, got number"),
        (16, "meta: expected an object, got array"),
        (17, "invalid JSON: NaN is not valid JSON"),
    ]
    assert [item.line for item in results if isinstance(item, ParsedChain)] == [1, 18]


def test_a_20_mb_line_is_reported_without_being_loaded_and_parsing_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "huge.jsonl"
    line_bytes = 20 * 1024 * 1024
    with path.open("wb") as out:
        out.write(jsonl(GOOD))
        out.write(b'{"problem": "' + b"x" * line_bytes + b'", "steps": ["a"]}\n')
        out.write(jsonl(GOOD))

    tracemalloc.start()
    try:
        results = parse_file(path, "generic")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert errors_of(results) == [(2, f"line longer than {MAX_LINE_BYTES} bytes")]
    assert [item.line for item in results if isinstance(item, ParsedChain)] == [1, 3]
    assert peak < line_bytes


def test_line_length_limit_is_exact_and_ignores_the_line_ending() -> None:
    fits = b'{"a": "' + b"x" * 41 + b'"}'  # 50 bytes
    too_long = b'{"a": "' + b"x" * 42 + b'"}'  # 51 bytes
    data = fits + b"\r\n" + too_long + b"\n" + fits

    results = list(iter_json_records(io.BytesIO(data), max_line_bytes=50))

    assert results == [
        (RecordAt(line=1), {"a": "x" * 41}),
        LineError(2, "line longer than 50 bytes"),
        (RecordAt(line=3), {"a": "x" * 41}),
    ]


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b'{"problem": "a\\u0000b", "steps": ["s"]}', "problem: contains a NUL character"),
        (b'{"problem": "p", "steps": ["\\ud800"]}', "steps[0]: contains an unpaired surrogate"),
        (b'{"problem": "p", "steps": ["s"], "meta": {"n": "\\u0000"}}', "meta.n: contains a NUL"),
    ],
)
def test_text_that_the_database_cannot_store_is_reported_per_field(
    line: bytes, reason: str
) -> None:
    ((number, message),) = errors_of(parse_bytes(line + b"\n", "generic"))

    assert number == 1
    assert message.startswith(reason)


def test_escaped_surrogate_pairs_are_fine() -> None:
    (chain,) = only_chains(parse_bytes(b'{"problem": "\\ud83d\\ude00", "steps": ["s"]}', "generic"))

    assert chain.problem == "\U0001f600"


def test_bom_crlf_and_missing_final_newline_are_accepted() -> None:
    data = b"\xef\xbb\xbf" + json.dumps(GOOD).encode() + b"\r\n\r\n" + json.dumps(GOOD).encode()

    chains = only_chains(parse_bytes(data, "generic"))

    assert [chain.line for chain in chains] == [1, 3]


def test_empty_file_yields_nothing() -> None:
    assert parse_bytes(b"", "generic") == []
    assert parse_bytes(b"\n  \n", "generic") == []


def test_unknown_format_or_step_split_fails_before_reading() -> None:
    with pytest.raises(ValueError, match="unknown import format 'csv'"):
        iter_chains(io.BytesIO(b""), "csv")
    with pytest.raises(ValueError, match="unknown step split 'sentence'"):
        iter_chains(io.BytesIO(b""), "generic", step_split="sentence")


def test_parsers_import_no_django() -> None:
    """The parsers are pure Python: the import service, the CLI and benchmarks share
    them, and they stay testable without settings."""
    code = (
        "import sys, annotation.datasets.importers; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'django'))"
    )

    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )

    assert completed.stdout.strip() == "[]"


# --- streaming ------------------------------------------------------------------------


class EndlessStream(io.RawIOBase):
    """An infinite file: `opening` once, then `record` forever. Reading more than
    `budget` bytes fails the test, so a parser that tries to read the whole file is
    caught instead of hanging."""

    def __init__(self, opening: bytes, record: bytes, budget: int) -> None:
        self._chunks = self._generate(opening, record)
        self._pending = b""
        self.delivered = 0
        self._budget = budget

    @staticmethod
    def _generate(opening: bytes, record: bytes) -> Iterator[bytes]:
        yield opening
        while True:
            yield record

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            self._pending = next(self._chunks)
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        self.delivered += size
        assert self.delivered <= self._budget, "the parser read far ahead: it is not streaming"
        return size


@pytest.mark.parametrize(
    ("opening", "record", "fmt"),
    [
        (b"", json.dumps(GOOD).encode() + b"\n", "generic"),
        (b"[", json.dumps({**GOOD, "label": -1}).encode() + b",", "processbench"),
    ],
)
def test_iter_chains_yields_records_before_the_file_ends(
    opening: bytes, record: bytes, fmt: str
) -> None:
    raw = EndlessStream(opening, record, budget=1024 * 1024)

    chains = iter_chains(io.BufferedReader(raw), fmt)
    first_three = [next(chains) for _ in range(3)]

    assert all(isinstance(chain, ParsedChain) for chain in first_three)
    assert [chain.line if fmt == "generic" else chain.record for chain in first_three] == [1, 2, 3]
    assert raw.delivered < 256 * 1024


# --- content hash and docstring examples ----------------------------------------------


def test_content_hash_is_stable_and_sees_step_boundaries() -> None:
    digest = content_hash("p", ["a", "b"])

    assert digest == content_hash("p", ("a", "b"))
    assert len(digest) == 64
    assert digest != content_hash("p", ["a\nb"])
    assert digest != content_hash("p", ["a", "b", ""])
    assert content_hash("é", ["ü"]) != content_hash("e", ["u"])


@pytest.mark.parametrize("module", [records, generic, processbench])
def test_docstring_examples(module: object) -> None:
    result = doctest.testmod(module)  # type: ignore[arg-type]

    assert result.attempted > 0
    assert result.failed == 0


# --- the real public samples ----------------------------------------------------------


@pytest.mark.parametrize(("name", "fmt", "count"), REAL_FILES)
def test_every_real_record_parses(name: str, fmt: str, count: int) -> None:
    chains = only_chains(parse_file(real_data() / name, fmt))

    assert len(chains) == count
    if (real_data() / name).read_bytes().lstrip()[:1] == b"[":
        assert [chain.record for chain in chains] == list(range(1, count + 1))
    else:
        assert [chain.line for chain in chains] == list(range(1, count + 1))
    for chain in chains:
        assert chain.problem and chain.problem == chain.problem.strip()
        assert chain.steps and all(step and step == step.strip() for step in chain.steps)
        assert chain.labels is None or len(chain.labels) == len(chain.steps)
        assert chain.labels is None or chain.label_source == fmt
        json.dumps(chain.meta, allow_nan=False)  # storable in a JSON column


def test_real_processbench_labels_match_the_first_error_index() -> None:
    path = real_data() / "processbench" / "math.json"
    raw = json.loads(path.read_text())

    chains = only_chains(parse_file(path, "processbench"))

    for record, chain in zip(raw, chains, strict=True):
        first_error = record["label"]
        assert chain.meta["id"] == record["id"]
        assert chain.generator == record["generator"]
        if first_error == -1:
            assert chain.labels == (1,) * len(chain.steps)
        else:
            assert chain.labels is not None
            assert chain.labels[first_error] == -1
            assert set(chain.labels[:first_error]) <= {1}
            assert set(chain.labels[first_error + 1 :]) <= {None}


def test_real_prm800k_quirks() -> None:
    chains = only_chains(parse_file(real_data() / "prm800k" / "real_records.jsonl", "prm800k"))
    by_line = {chain.line: chain for chain in chains}
    labels = {line: chain.labels or () for line, chain in by_line.items()}

    # Line 1 (phase 1): a human completion object with a null rating at step 1.
    assert by_line[1].meta["human_steps"] == [1]
    assert labels[1][1] is None
    assert by_line[1].answer == by_line[1].reference_answer == "29"
    # Line 5 (phase 1, give_up): the ninth step has neither completions nor a human one.
    assert len(by_line[5].steps) == 8
    # Line 2 (phase 2, found_error): the chain ends at the rated first error.
    assert labels[2][-1] == -1
    assert by_line[2].meta["unchosen_steps"] == [6]
    assert by_line[2].meta["pre_generated_answer"] == "7200"
    # Line 9: labeled to the end, so its answer is the pre-generated one.
    assert by_line[9].answer == by_line[9].meta["pre_generated_answer"]
    # Line 6: a screening question with no ground-truth answer.
    assert by_line[6].reference_answer == ""


def test_real_math_shepherd_labels_follow_the_plus_minus_marks() -> None:
    path = real_data() / "math_shepherd" / "samples.jsonl"
    raw = [json.loads(line) for line in path.read_text().splitlines()]

    chains = only_chains(parse_file(path, "math_shepherd"))

    for record, chain in zip(raw, chains, strict=True):
        assert chain.labels is not None
        assert record["input"].startswith(chain.problem)
        assert chain.steps[0] in record["input"]
        marks = [mark for mark in record["label"].split("\n") if mark]
        assert [1 if mark.endswith("+") else -1 for mark in marks] == list(chain.labels)


# --- nesting depth -------------------------------------------------------------------


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def test_a_line_nested_too_deep_is_reported_and_parsing_goes_on() -> None:
    ok_meta = b'{"problem": "p", "steps": ["a"], "meta": {"x": %s}}' % _deep(MAX_JSON_DEPTH - 2)
    data = b"\n".join([ok_meta, _deep(100_000), jsonl({"problem": "q", "steps": ["b"]}).strip()])

    results = parse_bytes(data + b"\n", "generic")

    assert errors_of(results) == [
        (2, f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects")
    ]
    assert [item.line for item in results if isinstance(item, ParsedChain)] == [1, 3]


def test_a_json_array_stops_at_the_record_nested_too_deep() -> None:
    good = b'{"problem": "p", "steps": ["a"]}'
    data = b"[" + good + b", " + good.replace(b'"a"', b'"b"') + b", " + _deep(5_000) + b"]"

    results = parse_bytes(data, "generic")

    assert places(results) == ["record 1 (line 1)", "record 2 (line 1)"]
    assert [line for line, _ in errors_of(results)] == ["record 3 (line 1)"]
    assert "nested deeper than" in errors_of(results)[0][1]


def test_detection_reads_the_keys_before_deep_nesting() -> None:
    head = b'{"problem": "p", "steps": ["a"], "meta": ' + b"[" * 60_000

    assert detect_format(head) == "generic"


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = json.dumps({"problem": "[" * 1000 + '{\\"', "steps": ["]" * 10, "\\" * 3]})

    assert json_shape_problem(text.encode()) is None
    deeper = text.encode()[:-1] + b', "m": ' + _deep(70) + b"}"
    assert json_shape_problem(deeper) == TOO_DEEP


@pytest.mark.parametrize(
    "data",
    [
        b'{"a": "x\\\\\\"[[[[", "b": [[["\\\\"]]], {"c": "]]"}]}',
        b'[["\\"[", [[[1]]], "\\\\", {"k": "]]]]"}]]',
        b'["unterminated [[[[',
    ],
)
@pytest.mark.parametrize("max_record_values", [None, 4])
def test_the_gauge_reads_pieces_as_the_whole(data: bytes, max_record_values: int | None) -> None:
    whole = JsonGauge(max_depth=3, max_record_values=max_record_values).feed(data)
    for cut in range(len(data) + 1):
        gauge = JsonGauge(max_depth=3, max_record_values=max_record_values)
        first = gauge.feed(data[:cut])
        second = gauge.feed(data[cut:]) if first is None else None
        assert (
            first if first is not None else second + cut if second is not None else None
        ) == whole


def test_unstorable_text_is_found_at_any_depth_without_recursion() -> None:
    value: object = "bad\x00"
    for _ in range(10_000):
        value = [value]

    assert unstorable_string({"meta": value}) == "meta" + "[0]" * 10_000 + (
        ": contains a NUL character (\\u0000), which cannot be stored"
    )


def _wide_record(values: int) -> bytes:
    """A generic record of exactly `values` values as the readers count them (brackets
    that open arrays and objects, and commas)."""
    items = values - 5  # the record, its steps, meta and meta.w, and two member commas
    return b'{"problem": "p", "steps": ["a"], "meta": {"w": [%s]}}' % b",".join([b"0"] * items)


@pytest.mark.parametrize("layout", ["jsonl", "array"])
def test_a_record_of_too_many_values_is_refused_before_it_is_decoded(layout: str) -> None:
    at_limit, over = _wide_record(MAX_JSON_VALUES), _wide_record(MAX_JSON_VALUES + 1)
    if layout == "jsonl":
        data = b"\n".join([at_limit, over, at_limit]) + b"\n"
        expected = [(2, TOO_MANY_VALUES)]
        chains = [1, 3]
    else:
        data = b"[" + b", ".join([at_limit, at_limit, over]) + b"]"
        expected = [
            ("record 3 (line 1)", f"{TOO_MANY_VALUES}; the rest of the JSON array cannot be read")
        ]
        chains = ["record 1 (line 1)", "record 2 (line 1)"]

    results = parse_bytes(data, "generic")

    assert errors_of(results) == expected
    assert places(results) == chains


# --- where a bad record is, and a key it lacks (issue 21, point 11) --------------------

# Per format: a good record, and the key whose absence each test takes out.
_MISSING_KEY_CASES = [
    ("generic", GOOD, "problem", "problem: missing (expected a string)"),
    ("generic", GOOD, "steps", "steps: missing (expected an array of strings or a string)"),
    (
        "processbench",
        {**GOOD, "label": -1},
        "label",
        "label: missing (expected an integer step index)",
    ),
    ("processbench", {**GOOD, "label": -1}, "steps", "steps: missing (expected an array)"),
    (
        "trl",
        {"prompt": "p", "completions": ["a"], "labels": [True]},
        "completions",
        "completions: missing (expected an array)",
    ),
    ("trl", {"prompt": "p", "completions": ["a"]}, "prompt", "prompt: missing (expected a string)"),
    (
        "math_shepherd",
        {"input": "q Step 1: a ки", "label": "q Step 1: a +"},
        "input",
        "input: missing (expected a string)",
    ),
    (
        "prm800k",
        _prm800k_line([{"completions": [{"text": "a", "rating": 1}], "chosen_completion": 0}]),
        "question",
        "question: missing (expected an object)",
    ),
    (
        "prm800k",
        _prm800k_line([{"completions": [{"text": "a", "rating": 1}], "chosen_completion": 0}]),
        "label",
        "label: missing (expected an object)",
    ),
]


@pytest.mark.parametrize(("fmt", "good", "key", "reason"), _MISSING_KEY_CASES)
def test_a_missing_key_is_called_missing_and_a_null_one_null(
    fmt: str, good: dict[str, object], key: str, reason: str
) -> None:
    lacking = {name: value for name, value in good.items() if name != key}

    assert errors_of(parse_bytes(jsonl(lacking), fmt)) == [(1, reason)]
    null = errors_of(parse_bytes(jsonl({**good, key: None}), fmt))
    assert len(null) == 1 and null[0][1].endswith("got null"), null
    assert "missing" not in null[0][1]


def test_prm800k_names_a_missing_nested_key_by_its_path() -> None:
    step = {"completions": [{"rating": 1}], "chosen_completion": 0}
    no_text = _prm800k_line([step])
    no_problem = {"question": {}, "label": {"steps": []}}
    no_steps = {"question": {"problem": "p"}, "label": {}}

    assert errors_of(parse_bytes(jsonl(no_text, no_problem, no_steps), "prm800k")) == [
        (1, "label.steps[0].completions[0].text: missing (expected a string)"),
        (2, "question.problem: missing (expected a string)"),
        (3, "label.steps: missing (expected an array)"),
    ]


@pytest.mark.parametrize("fmt", ["generic", "processbench", "trl", "math_shepherd", "prm800k"])
def test_a_one_line_json_array_names_its_records_not_lines(fmt: str) -> None:
    record = next(case[1] for case in _MISSING_KEY_CASES if case[0] == fmt)
    key, reason = next((case[2], case[3]) for case in _MISSING_KEY_CASES if case[0] == fmt)
    lacking = {name: value for name, value in record.items() if name != key}
    items = [record] * 80
    items[73] = lacking  # the 74th record

    results = parse_bytes(json.dumps(items).encode(), fmt)

    assert errors_of(results) == [("record 74 (line 1)", reason)]
    (error,) = [item for item in results if isinstance(item, LineError)]
    assert (error.line, error.record) == (1, 74)


def test_records_of_an_array_over_many_lines_carry_the_line_they_start_on() -> None:
    bad = {"steps": ["a"]}
    text = "[\n  " + ",\n  ".join(json.dumps(item) for item in [GOOD, GOOD, bad]) + "\n]\n"
    pretty = "[\n" + ",\n".join(json.dumps(item, indent=2) for item in [GOOD, bad]) + "\n]"

    assert errors_of(parse_bytes(text.encode(), "generic")) == [
        ("record 3 (line 4)", "problem: missing (expected a string)")
    ]
    # An indented record starts on the line of its opening brace; the lines inside it
    # (and the commas between records) move the next one down.
    assert errors_of(parse_bytes(pretty.encode(), "generic")) == [
        ("record 2 (line 9)", "problem: missing (expected a string)")
    ]


def test_the_record_line_survives_reads_cut_anywhere() -> None:
    """The gauge sees the array in reads of any size; a record's start line must not
    depend on where a read ends (inside the whitespace between records included)."""
    text = "[\n" + ",\n\n".join(json.dumps(item) for item in [GOOD] * 6) + "\n]"
    data = text.encode()
    expected = [2 * index + 2 for index in range(6)]  # a blank line between records
    for size in (1, 2, 3, 7, 64):
        gauge = JsonGauge(max_depth=10, record_lines=True)
        for start in range(0, len(data), size):
            gauge.feed(data[start : start + size])
        assert list(gauge.record_starts or []) == expected, size
