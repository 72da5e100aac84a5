"""chain_import: the write path behind the import command and endpoint (PostgreSQL/COPY)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from django.db import connections

from annotation.datasets import import_orm, import_reading, imports
from annotation.datasets.importers.formats import FormatDetectionError, iter_chains
from annotation.datasets.importers.records import LineError, content_hash
from annotation.datasets.imports import ImportRejected, chain_import
from annotation.models import (
    Annotation,
    AnnotationSource,
    Chain,
    ImportBatch,
    Problem,
    Project,
    Step,
    StepRating,
)

pytestmark = pytest.mark.django_db

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "imports"


def write_jsonl(path: Path, records: Iterable[Any]) -> Path:
    """One record a line; a str record is written verbatim (for broken lines)."""
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(record if isinstance(record, str) else json.dumps(record))
            out.write("\n")
    return path


def table_counts() -> dict[str, int]:
    return {
        model.__name__: model.objects.count()
        for model in (ImportBatch, Problem, Chain, Step, Annotation, StepRating)
    }


def chain_steps(chain: Chain) -> list[str]:
    return list(chain.steps.order_by("index").values_list("text", flat=True))


def chain_ratings(chain: Chain) -> dict[int, int]:
    """step index -> rating of the chain's import annotation."""
    annotation = chain.annotations.get(source=AnnotationSource.IMPORT)
    return dict(annotation.ratings.values_list("step__index", "rating"))


# --- the generic format, end to end --------------------------------------------------


def test_generic_file_creates_problems_chains_and_steps(project: Project, tmp_path: Path) -> None:
    # Given two chains for one problem and one for another, with answers and meta
    path = write_jsonl(
        tmp_path / "chains.jsonl",
        [
            {
                "problem": "What is 2+2?",
                "steps": ["2+2=4", "The answer is 4"],
                "answer": "4",
                "generator": "model-a",
                "meta": {"id": "a1", "score": 0.5},
            },
            {
                "problem": "What is 2+2?",
                "steps": ["2+2=5", "The answer is 5"],
                "answer": "5",
                "reference_answer": "4",
            },
            {"problem": "What is 3*3?", "steps": ["3*3=9"], "answer": "9"},
        ],
    )

    # When it is imported
    result = chain_import(project=project, path=path)

    # Then every chain is there with its steps in order, under one problem per text
    assert (result.chains_created, result.steps_created, result.labels_created) == (3, 5, 0)
    assert (result.chains_duplicate, result.already_imported) == (0, False)
    assert result.format == "generic"
    assert result.filename == "chains.jsonl"
    batch = ImportBatch.objects.get(pk=result.batch_id)
    assert (batch.project, batch.format, batch.chains_created, batch.steps_created) == (
        project,
        "generic",
        3,
        5,
    )
    assert Problem.objects.filter(project=project).count() == 2
    first = Chain.objects.get(project=project, final_answer="4")
    assert chain_steps(first) == ["2+2=4", "The answer is 4"]
    assert (first.generator, first.step_count, first.priority) == ("model-a", 2, 0.0)
    assert first.meta == {"id": "a1", "score": 0.5}
    assert first.import_batch_id == batch.pk
    assert (first.finished_count, first.is_finished, first.is_flagged) == (0, False, False)
    # A chain's reference answer fills its problem's
    assert first.problem.reference_answer == "4"
    assert Chain.objects.get(final_answer="5").problem_id == first.problem_id
    assert Annotation.objects.count() == 0


def test_labels_become_an_import_annotation_not_a_persons(project: Project, tmp_path: Path) -> None:
    # Given a chain with labels, one step unrated (null), and one without labels
    path = write_jsonl(
        tmp_path / "labeled.jsonl",
        [
            {"problem": "p1", "steps": ["a", "b", "c", "d"], "labels": [1, 0, -1, None]},
            {"problem": "p2", "steps": ["x", "y"]},
        ],
    )

    # When it is imported
    result = chain_import(project=project, path=path)

    # Then the labels are one import annotation, with no row for the unrated step
    assert result.labels_created == 3
    chain = Chain.objects.get(problem__text="p1")
    annotation = Annotation.objects.get()
    assert annotation.chain == chain
    assert (annotation.source, annotation.source_name) == ("import", "generic")
    assert annotation.annotator is None
    assert annotation.import_batch_id == result.batch_id
    assert chain_ratings(chain) == {0: 1, 1: 0, 2: -1}
    # and they are not a person's pass: the chain still waits for its annotators
    chain.refresh_from_db()
    assert (chain.finished_count, chain.is_finished) == (0, False)
    assert not Chain.objects.get(problem__text="p2").annotations.exists()


def test_a_chain_with_only_unrated_steps_gets_no_annotation(
    project: Project, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "a.jsonl", [{"problem": "p", "steps": ["a"], "labels": [None]}])

    result = chain_import(project=project, path=path)

    assert (result.chains_created, result.labels_created) == (1, 0)
    assert Annotation.objects.count() == 0


# --- repeated files and duplicates ---------------------------------------------------


def test_the_same_file_again_adds_nothing(project: Project, tmp_path: Path) -> None:
    # Given a file already imported
    path = write_jsonl(
        tmp_path / "f.jsonl", [{"problem": "p", "steps": ["a", "b"], "labels": [1, 1]}]
    )
    first = chain_import(project=project, path=path)
    before = table_counts()

    # When the same bytes come again, under another name
    again = chain_import(project=project, path=path, filename="renamed.jsonl")

    # Then nothing is added and the earlier import is named
    assert again.already_imported is True
    assert again.batch_id == first.batch_id
    assert (again.chains_created, again.steps_created, again.labels_created) == (0, 0, 0)
    assert table_counts() == before


def test_the_same_file_into_another_project_is_imported_there(
    project: Project, tmp_path: Path
) -> None:
    from tests.factories import ProjectFactory

    path = write_jsonl(tmp_path / "f.jsonl", [{"problem": "p", "steps": ["a"]}])
    chain_import(project=project, path=path)
    other = ProjectFactory()

    result = chain_import(project=other, path=path)

    assert (result.already_imported, result.chains_created) == (False, 1)
    assert Chain.objects.filter(project=other).count() == 1


def test_overlapping_chains_are_counted_as_duplicates(project: Project, tmp_path: Path) -> None:
    # Given a project holding chains A and B
    a = {"problem": "p", "steps": ["a1", "a2"]}
    b = {"problem": "p", "steps": ["b1"]}
    c = {"problem": "q", "steps": ["c1"], "labels": [1]}
    chain_import(project=project, path=write_jsonl(tmp_path / "first.jsonl", [a, b]))

    # When a different file holds B, C, and C again (and B with other surrounding spaces,
    # which the parsers strip)
    b_spaced = {"problem": " p ", "steps": ["b1  "]}
    result = chain_import(
        project=project, path=write_jsonl(tmp_path / "second.jsonl", [b, c, c, b_spaced])
    )

    # Then only C is new; the rest are duplicates and nothing is written twice
    assert (result.chains_created, result.chains_duplicate) == (1, 3)
    assert (result.steps_created, result.labels_created) == (1, 1)
    assert Chain.objects.filter(project=project).count() == 3
    assert Problem.objects.filter(project=project).count() == 2
    assert Annotation.objects.count() == 1


def test_a_later_reference_answer_fills_an_existing_problem(
    project: Project, tmp_path: Path
) -> None:
    chain_import(
        project=project,
        path=write_jsonl(
            tmp_path / "1.jsonl",
            [
                {"problem": "p", "steps": ["a"]},
            ],
        ),
    )
    chain_import(
        project=project,
        path=write_jsonl(
            tmp_path / "2.jsonl",
            [
                {"problem": "p", "steps": ["b"], "reference_answer": "42"},
                {"problem": "p", "steps": ["c"], "reference_answer": "43"},
            ],
        ),
    )

    problem = Problem.objects.get(project=project)
    # the first one seen fills it; a later one never overwrites it
    assert problem.reference_answer == "42"
    assert problem.chains.count() == 3


# --- all or nothing ------------------------------------------------------------------


def test_a_file_with_bad_lines_writes_nothing_and_reports_every_one(
    project: Project, tmp_path: Path
) -> None:
    # Given a project with earlier data and a file of 2 good and 2 bad lines
    chain_import(
        project=project,
        path=write_jsonl(
            tmp_path / "ok.jsonl",
            [
                {"problem": "old", "steps": ["s"], "labels": [1]},
            ],
        ),
    )
    before = table_counts()
    path = write_jsonl(
        tmp_path / "mixed.jsonl",
        [
            {"problem": "p", "steps": ["a"], "labels": [1]},
            {"problem": "p", "steps": []},
            {"problem": "q", "steps": ["b"]},
            '{"problem": "r", "steps": ["c"',
        ],
    )

    # When it is imported
    with pytest.raises(ImportRejected) as rejected:
        chain_import(project=project, path=path)

    # Then both bad lines are named, and no table gained a row
    assert [error.line for error in rejected.value.errors] == [2, 4]
    assert rejected.value.error_count == 2
    assert rejected.value.format == "generic"
    assert str(rejected.value).startswith("2 bad lines; line 2: ")
    assert "line 4: " in str(rejected.value)
    assert table_counts() == before


def test_bad_lines_after_the_first_chunk_roll_back_the_chunks_written(
    project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given chunks of 10 chains, and a bad line at the very end of a 35-line file
    monkeypatch.setattr(import_reading, "CHUNK_CHAINS", 10)
    records: list[Any] = [
        {"problem": f"p{i}", "steps": [f"s{i}"], "labels": [1]} for i in range(34)
    ]
    records.append({"problem": "last", "steps": "   "})
    path = write_jsonl(tmp_path / "late.jsonl", records)

    with pytest.raises(ImportRejected) as rejected:
        chain_import(project=project, path=path)

    # Then the three chunks already copied are gone as well
    assert [error.line for error in rejected.value.errors] == [35]
    assert table_counts() == dict.fromkeys(table_counts(), 0)


def _twenty_mb_line() -> str:
    return json.dumps({"problem": "p", "steps": ["x" * (20 * 1024 * 1024)]})


@pytest.mark.parametrize(
    ("name", "bad_line"),
    [
        ("truncated line", b'{"problem": "p", "steps": ["a", "b"'),
        ("wrong types", b'{"problem": 7, "steps": "a"}'),
        ("steps not strings", b'{"problem": "p", "steps": [1, 2]}'),
        ("empty steps", b'{"problem": "p", "steps": []}'),
        ("blank step", b'{"problem": "p", "steps": ["a", "  "]}'),
        ("labels of the wrong length", b'{"problem": "p", "steps": ["a"], "labels": [1, 1]}'),
        ("a rating out of range", b'{"problem": "p", "steps": ["a"], "labels": [2]}'),
        ("non-UTF-8 bytes", b'{"problem": "caf\xe9", "steps": ["a"]}'),
        ("a NUL character", b'{"problem": "p", "steps": ["a\\u0000b"]}'),
        ("an unpaired surrogate", b'{"problem": "p", "steps": ["\\ud800"]}'),
        ("not an object", b'["p", ["a"]]'),
        ("a 20 MB line", None),
    ],
)
def test_a_broken_line_is_a_clean_rejection_with_its_line_number(
    project: Project, tmp_path: Path, name: str, bad_line: bytes | None
) -> None:
    # Given a good first line, the broken one on line 2, and a good third line
    good = json.dumps({"problem": "fine", "steps": ["ok"]}).encode()
    line = _twenty_mb_line().encode() if bad_line is None else bad_line
    path = tmp_path / "broken.jsonl"
    path.write_bytes(good + b"\n" + line + b"\n" + good.replace(b"ok", b"ok too") + b"\n")

    # When it is imported
    with pytest.raises(ImportRejected) as rejected:
        chain_import(project=project, path=path, fmt="generic")

    # Then line 2, and only line 2, is reported with a reason; nothing is written
    errors = rejected.value.errors
    assert [error.line for error in errors] == [2], name
    assert errors[0].reason
    assert table_counts() == dict.fromkeys(table_counts(), 0)


def test_a_file_with_no_records_is_rejected(project: Project, tmp_path: Path) -> None:
    path = tmp_path / "blank.jsonl"
    path.write_text("\n\n")

    with pytest.raises(ImportRejected, match="holds no chains"):
        chain_import(project=project, path=path, fmt="generic")
    assert ImportBatch.objects.count() == 0


def test_an_undetectable_format_is_refused_before_anything_is_written(
    project: Project, tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "what.jsonl", [{"colour": "blue"}])

    with pytest.raises(FormatDetectionError, match="cannot tell the format"):
        chain_import(project=project, path=path)
    with pytest.raises(ValueError, match="Unknown format"):
        chain_import(project=project, path=path, fmt="csv")
    assert ImportBatch.objects.count() == 0


def test_many_bad_lines_keep_a_bounded_list_and_the_full_count(
    project: Project, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(imports, "MAX_KEPT_ERRORS", 5)
    path = write_jsonl(tmp_path / "bad.jsonl", ['{"problem": 1}'] * 12)

    with pytest.raises(ImportRejected) as rejected:
        chain_import(project=project, path=path, fmt="generic")

    assert rejected.value.error_count == 12
    assert [error.line for error in rejected.value.errors] == [1, 2, 3, 4, 5]
    assert "12 bad lines" in str(rejected.value)


# --- the two writers agree -----------------------------------------------------------


def _snapshot(project: Project) -> list[tuple[Any, ...]]:
    """Everything an import wrote for the project, without ids."""
    rows = []
    for chain in Chain.objects.filter(project=project).order_by("content_hash"):
        annotations = [
            (
                a.source,
                a.source_name,
                a.annotator_id,
                sorted(a.ratings.values_list("step__index", "rating")),
            )
            for a in chain.annotations.all()
        ]
        rows.append(
            (
                chain.problem.text,
                chain.problem.reference_answer,
                chain.content_hash,
                chain.final_answer,
                chain.generator,
                chain.meta,
                chain.step_count,
                chain.priority,
                chain_steps(chain),
                annotations,
            )
        )
    return rows


def test_the_bulk_create_fallback_writes_what_copy_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.factories import ProjectFactory

    # Given one labeled, partly duplicated file
    records: list[Any] = [
        {
            "problem": f"p{i % 3}",
            "steps": [f"s{i}", f"t{i}"],
            "labels": [1, -1 if i % 2 else None],
            "reference_answer": str(i % 3),
            "meta": {"i": i},
        }
        for i in range(9)
    ]
    records += [
        {"problem": "p0", "steps": ["s0", "t0"], "labels": [1, None]},
        {"problem": "plain", "steps": ["u"]},
    ]
    path = write_jsonl(tmp_path / "both.jsonl", records)
    copy_project, orm_project = ProjectFactory(), ProjectFactory()

    # When it goes through COPY into one project and through bulk_create into another
    via_copy = chain_import(project=copy_project, path=path)
    monkeypatch.setattr(
        imports,
        "_writer_for",
        lambda *, project, batch, now: import_orm.OrmWriter(project=project, batch=batch),
    )
    via_orm = chain_import(project=orm_project, path=path)

    # Then both wrote the same rows
    assert via_copy.chains_created == via_orm.chains_created == 10
    assert via_copy.chains_duplicate == via_orm.chains_duplicate == 1
    assert via_copy.labels_created == via_orm.labels_created == 9 + 4
    assert _snapshot(copy_project) == _snapshot(orm_project)


# --- size ----------------------------------------------------------------------------


def test_a_medium_file_goes_through_copy_in_chunks(project: Project, tmp_path: Path) -> None:
    # Given 5,000 chains of 10 steps (every fifth labeled), more than two chunks' worth
    path = tmp_path / "medium.jsonl"
    with path.open("w") as out:
        for i in range(5_000):
            record: dict[str, Any] = {
                "problem": f"Problem {i // 4}",
                "steps": [f"chain {i} step {j}" for j in range(10)],
            }
            if i % 5 == 0:
                record["labels"] = [1] * 9 + [-1]
            out.write(json.dumps(record) + "\n")
    seen: list[int] = []

    # When it is imported (its speed is bench/bench_foundation.py's to measure)
    result = chain_import(project=project, path=path, progress=seen.append)

    # Then every row is there and the progress covered every record
    assert (result.chains_created, result.steps_created, result.labels_created) == (
        5_000,
        50_000,
        10_000,
    )
    assert sum(seen) == 5_000 and len(seen) == -(-5_000 // import_reading.CHUNK_CHAINS)
    assert Step.objects.filter(chain__project=project).count() == 50_000
    assert Problem.objects.filter(project=project).count() == 1_250
    assert StepRating.objects.filter(rating=-1).count() == 1_000
    last = Chain.objects.get(
        content_hash=content_hash("Problem 1249", [f"chain 4999 step {j}" for j in range(10)])
    )
    assert chain_steps(last)[-1] == "chain 4999 step 9"


# --- concurrency ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_concurrent_imports_of_overlapping_files_do_not_collide(tmp_path: Path) -> None:
    from tests.factories import ProjectFactory

    # Given two different files sharing 200 of their chains
    project = ProjectFactory()
    shared = [{"problem": f"shared {i}", "steps": ["a", "b"]} for i in range(200)]
    paths = [
        write_jsonl(
            tmp_path / f"{name}.jsonl",
            shared + [{"problem": f"{name} {i}", "steps": ["c"]} for i in range(300)],
        )
        for name in ("left", "right")
    ]
    results: list[Any] = []

    def run(path: Path) -> None:
        try:
            results.append(chain_import(project=project, path=path))
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            results.append(exc)
        finally:
            connections.close_all()

    # When both are imported at the same time
    threads = [threading.Thread(target=run, args=(path,)) for path in paths]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    # Then both succeed, one of them finding the shared chains already there
    assert all(not isinstance(r, Exception) for r in results), results
    assert sorted(r.chains_duplicate for r in results) == [0, 200]
    assert Chain.objects.filter(project=project).count() == 800


# --- the real public files in ../shared/data -----------------------------------------


def assert_stored_as_parsed(project: Project, path: Path, fmt: str) -> None:
    """Every chain the parser reads from the file is in the database as read: its steps
    in order, and its labels as one import annotation (no row for an unrated step)."""
    chains = {
        chain.content_hash: chain
        for chain in Chain.objects.filter(project=project).select_related("problem")
    }
    steps: dict[int, list[str]] = {}
    for chain_id, text in Step.objects.filter(chain__project=project).values_list(
        "chain_id", "text"
    ):  # ordered by chain, index
        steps.setdefault(chain_id, []).append(text)
    ratings: dict[int, dict[int, int]] = {}
    for chain_id, index, rating in StepRating.objects.filter(
        annotation__chain__project=project, annotation__source=AnnotationSource.IMPORT
    ).values_list("annotation__chain_id", "step__index", "rating"):
        ratings.setdefault(chain_id, {})[index] = rating
    with path.open("rb") as stream:
        for parsed in iter_chains(stream, fmt):
            assert not isinstance(parsed, LineError), parsed
            chain = chains[content_hash(parsed.problem, parsed.steps)]
            assert chain.problem.text == parsed.problem
            assert steps[chain.pk] == list(parsed.steps)
            assert (chain.final_answer, chain.generator) == (parsed.answer, parsed.generator)
            expected = {
                index: label for index, label in enumerate(parsed.labels or ()) if label is not None
            }
            assert ratings.get(chain.pk, {}) == expected


@pytest.mark.parametrize("name", ["gsm8k", "math"])
def test_processbench_files_import_with_first_error_labels(
    project: Project, shared_data: Path, name: str
) -> None:
    # Given a real ProcessBench file (a JSON array)
    path = shared_data / "processbench" / f"{name}.json"
    records = json.loads(path.read_text())

    # When it is imported with format detection
    result = chain_import(project=project, path=path)

    # Then every record is a chain with its steps, labels by the first-error rule
    assert result.format == "processbench"
    assert result.chains_created == len(records) == {"gsm8k": 400, "math": 1000}[name]
    assert result.steps_created == sum(len(r["steps"]) for r in records)
    assert result.labels_created == sum(
        len(r["steps"]) if r["label"] == -1 else r["label"] + 1 for r in records
    )
    assert Problem.objects.filter(project=project).count() == len({r["problem"] for r in records})
    for record in records[:60]:
        chain = Chain.objects.get(
            project=project,
            content_hash=content_hash(
                record["problem"].strip(), [step.strip() for step in record["steps"]]
            ),
        )
        assert chain.generator == record["generator"]
        assert chain.meta["id"] == record["id"]
        ratings = chain_ratings(chain)
        label = record["label"]
        if label == -1:
            assert ratings == dict.fromkeys(range(len(record["steps"])), 1)
        else:
            # correct before the first error, -1 at it, and no row at all after it
            assert ratings == {**dict.fromkeys(range(label), 1), label: -1}
    annotation = Annotation.objects.filter(chain__project=project).first()
    assert annotation is not None
    assert (annotation.source, annotation.source_name, annotation.annotator_id) == (
        "import",
        "processbench",
        None,
    )
    assert not Chain.objects.filter(project=project, finished_count__gt=0).exists()
    assert_stored_as_parsed(project, path, "processbench")


def test_prm800k_real_lines_import_with_their_quirks(project: Project, shared_data: Path) -> None:
    # Given the 16 real PRM800K lines: human_completion objects, null completions,
    # null ratings
    path = shared_data / "prm800k" / "real_records.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    result = chain_import(project=project, path=path)

    assert (result.format, result.chains_created, result.chains_duplicate) == ("prm800k", 16, 0)
    # Line 1, step 2: no chosen completion, so the labeler's own step is followed, and a
    # human completion carries no rating: the step is unlabeled
    first_raw = lines[0]["label"]["steps"]
    first = Chain.objects.get(
        project=project,
        problem__text=lines[0]["question"]["problem"].strip(),
        steps__index=1,
        steps__text=first_raw[1]["human_completion"]["text"].strip(),
    )
    assert 1 not in chain_ratings(first)
    assert chain_ratings(first)[0] == first_raw[0]["completions"][0]["rating"]
    # Line 5 gave up on a step whose completions are null: the chain ends before it
    fifth_raw = lines[4]["label"]["steps"]
    assert fifth_raw[-1]["completions"] is None
    fifth = Chain.objects.get(
        project=project,
        problem__text=lines[4]["question"]["problem"].strip(),
        meta__timestamp=lines[4]["timestamp"],
    )
    assert fifth.step_count == len(fifth_raw) - 1
    # The ground-truth answer fills the problem's reference answer
    assert fifth.problem.reference_answer == lines[4]["question"]["ground_truth_answer"]
    assert set(
        Annotation.objects.filter(chain__project=project).values_list("source_name", flat=True)
    ) == {"prm800k"}
    assert_stored_as_parsed(project, path, "prm800k")


def test_math_shepherd_samples_import_with_plus_minus_labels(
    project: Project, shared_data: Path
) -> None:
    path = shared_data / "math_shepherd" / "samples.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    result = chain_import(project=project, path=path)

    # one step per "ки" tag, every step labeled from the "+"/"-" in the label string
    tags = sum(line["input"].count("ки") for line in lines)
    assert (result.format, result.chains_created) == ("math_shepherd", len(lines))
    assert result.steps_created == result.labels_created == tags
    minus = sum(line["label"].count(" -\n") + line["label"].endswith(" -") for line in lines)
    assert StepRating.objects.filter(annotation__chain__project=project, rating=-1).count() == minus
    assert_stored_as_parsed(project, path, "math_shepherd")


def test_a_real_file_that_holds_no_chains_is_refused_by_detection(
    project: Project, shared_data: Path
) -> None:
    with pytest.raises(FormatDetectionError):
        chain_import(project=project, path=shared_data / "math_aps" / "samples.jsonl")
    assert ImportBatch.objects.count() == 0


def test_math500_s_problems_import_as_problems_with_their_answers(
    project: Project, shared_data: Path
) -> None:
    """PRM800K's MATH500 problems (problem, solution, answer; no chains) are what a
    sampling run draws chains for (issue 23)."""
    path = shared_data / "prm800k" / "math500_problems.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    result = chain_import(project=project, path=path)

    assert (result.format, result.problems_created, result.chains_created) == ("problems", 500, 0)
    assert dict(Problem.objects.values_list("text", "reference_answer")) == {
        line["problem"].strip(): line["answer"].strip() for line in lines
    }


def test_the_project_fixtures_import(project: Project) -> None:
    """The project's own small files (tests/fixtures/imports) cover the same quirks
    without ../shared, so this runs everywhere."""
    good = sorted(
        path
        for path in FIXTURES.glob("*.json*")
        if not path.name.startswith(("bad", "broken", "invalid"))
    )
    assert good, f"no fixtures in {FIXTURES}"
    for path in good:
        result = chain_import(project=project, path=path)
        assert result.chains_created + result.chains_duplicate > 0, path.name
        assert_stored_as_parsed(project, path, result.format)


# --- per-chain limits ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "setting", "build", "reason"),
    [
        (
            "steps",
            "STEPLAB_IMPORT_MAX_STEPS",
            lambda limit: {"problem": "p", "steps": [f"s{i}" for i in range(limit + 1)]},
            "steps: 151 steps; a chain may have at most 150",
        ),
        (
            "a step",
            "STEPLAB_IMPORT_MAX_STEP_CHARS",
            lambda limit: {"problem": "p", "steps": ["ok", "x" * (limit + 1)]},
            "steps[1]: 10,001 characters; a step may have at most 10,000",
        ),
        (
            "the problem",
            "STEPLAB_IMPORT_MAX_PROBLEM_CHARS",
            lambda limit: {"problem": "p" * (limit + 1), "steps": ["ok"]},
            "problem: 20,001 characters; at most 20,000",
        ),
        (
            "the answer",
            "STEPLAB_IMPORT_MAX_PROBLEM_CHARS",
            lambda limit: {"problem": "p", "steps": ["ok"], "answer": "a" * (limit + 1)},
            "answer: 20,001 characters; at most 20,000",
        ),
    ],
)
def test_a_chain_over_a_limit_is_a_bad_line_with_its_number(
    project: Project,
    tmp_path: Path,
    settings: Any,
    field: str,
    setting: str,
    build: Any,
    reason: str,
) -> None:
    # Given a chain just over the limit, on line 2 between chains at the limit
    limit = getattr(settings, setting)
    at_limit = {
        "problem": "p" * settings.STEPLAB_IMPORT_MAX_PROBLEM_CHARS,
        "steps": ["x" * settings.STEPLAB_IMPORT_MAX_STEP_CHARS] * settings.STEPLAB_IMPORT_MAX_STEPS,
    }
    path = write_jsonl(tmp_path / "big.jsonl", [at_limit, build(limit), at_limit])

    # When it is imported
    with pytest.raises(ImportRejected) as rejected:
        chain_import(project=project, path=path, fmt="generic")

    # Then line 2 is reported, naming the limit; nothing is written
    assert [(error.line, error.reason.split(" (")[0]) for error in rejected.value.errors] == [
        (2, reason)
    ], field
    assert setting in rejected.value.errors[0].reason
    assert table_counts() == dict.fromkeys(table_counts(), 0)


def test_the_limits_are_settings(project: Project, tmp_path: Path, settings: Any) -> None:
    settings.STEPLAB_IMPORT_MAX_STEPS = 2
    path = write_jsonl(tmp_path / "three.jsonl", [{"problem": "p", "steps": ["a", "b", "c"]}])

    with pytest.raises(ImportRejected) as rejected:
        chain_import(project=project, path=path, fmt="generic")

    assert rejected.value.errors[0].reason.startswith("steps: 3 steps; a chain may have at most 2")


@pytest.mark.parametrize(
    ("name", "fmt"),
    [
        ("processbench/math.json", "processbench"),
        ("processbench/gsm8k.json", "processbench"),
        ("prm800k/real_records.jsonl", "prm800k"),
        ("math_shepherd/samples.jsonl", "math_shepherd"),
    ],
)
def test_the_real_data_is_importable_under_the_limits(
    project: Project, shared_data: Path, name: str, fmt: str
) -> None:
    result = chain_import(project=project, path=shared_data / name, fmt="auto")

    assert result.format == fmt
    assert result.chains_created + result.chains_duplicate > 0
