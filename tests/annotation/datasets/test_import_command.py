"""`manage.py import_chains PROJECT FILE [--format ...]`."""

from __future__ import annotations

import json
import re
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command, execute_from_command_line
from django.core.management.base import CommandError

from annotation.models import Annotation, Chain, ImportBatch, Project, Step, StepRating

pytestmark = pytest.mark.django_db


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command("import_chains", *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def write_jsonl(path: Path, lines: list[object]) -> Path:
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    )
    return path


def counts() -> tuple[int, ...]:
    return tuple(m.objects.count() for m in (ImportBatch, Chain, Step, Annotation, StepRating))


def test_prints_one_summary_line(project: Project, tmp_path: Path) -> None:
    # Given a generic file with 3 chains, one of them twice, and 2 labels
    path = write_jsonl(
        tmp_path / "small.jsonl",
        [
            {"problem": "p", "steps": ["a", "b"], "labels": [1, -1]},
            {"problem": "q", "steps": ["c"]},
            {"problem": "q", "steps": ["c"]},
            {"problem": "r", "steps": ["d", "e", "f"]},
        ],
    )

    # When it is imported by project name
    out, _ = run(project.name, str(path))

    # Then one line sums it up, and the chains are there
    assert out.splitlines() == [
        f'imported 3 chains (6 steps, 2 labels) from small.jsonl as generic into "{project.name}"; '
        "1 duplicate"
    ]
    assert Chain.objects.filter(project=project).count() == 3


def test_takes_the_project_id_and_an_explicit_format(project: Project, shared_data: Path) -> None:
    out, _ = run(
        str(project.pk),
        str(shared_data / "processbench" / "gsm8k.json"),
        "--format",
        "processbench",
    )

    assert re.fullmatch(
        r"imported 400 chains \(2,082 steps, [\d,]+ labels\) from gsm8k\.json as processbench "
        r'into ".+"; 0 duplicates\n',
        out,
    )
    assert Chain.objects.filter(project=project).count() == 400


def test_a_repeated_file_is_reported_as_already_imported(project: Project, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "f.jsonl", [{"problem": "p", "steps": ["a"]}])
    run(project.name, str(path))
    before = counts()

    out, _ = run(project.name, str(path))

    assert out.startswith("already imported: f.jsonl as generic into ")
    assert out.rstrip().endswith("nothing added")
    assert counts() == before


def test_a_bad_file_fails_listing_every_bad_line_and_writes_nothing(
    project: Project, tmp_path: Path
) -> None:
    path = write_jsonl(
        tmp_path / "bad.jsonl",
        [
            {"problem": "p", "steps": ["a"]},
            {"problem": "p", "steps": []},
            {"problem": "q", "steps": ["b"]},
            '{"problem": "r", "steps": ["c"',
        ],
    )

    with pytest.raises(CommandError) as failure:
        run(project.name, str(path))

    message = str(failure.value)
    assert "bad.jsonl was not imported (2 bad lines as generic; nothing was written)" in message
    assert re.search(r"^  line 2: steps", message, re.MULTILINE)
    assert re.search(r"^  line 4: ", message, re.MULTILINE)
    assert "line 1:" not in message and "line 3:" not in message
    assert counts() == (0, 0, 0, 0, 0)


def test_a_json_array_with_bad_records_names_each_record(project, tmp_path: Path) -> None:
    records = [{"problem": f"p{n}", "steps": ["a"]} for n in range(5)]
    records[3] = {"steps": ["a"]}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(records))

    with pytest.raises(CommandError) as failure:
        run(project.name, str(path))

    message = str(failure.value)
    assert "\n  record 4 (line 1): problem: missing (expected a string)" in message
    assert counts() == (0, 0, 0, 0, 0)


def test_a_long_list_of_bad_lines_is_cut_with_a_count(project: Project, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", ['{"problem": 1, "steps": ["a"]}'] * 60)

    with pytest.raises(CommandError) as failure:
        run(project.name, str(path), "--format", "generic")

    message = str(failure.value)
    assert "  line 50: " in message and "  line 51: " not in message
    assert "... and 10 more" in message


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("no such project", "{file}"), "No project with id or name 'no such project'"),
        (("{project}", "{missing}"), "no such file"),
        (("{project}", "{unknown}"), "cannot tell the format"),
    ],
)
def test_bad_arguments_are_clear_errors(
    project: Project, tmp_path: Path, args: tuple[str, str], expected: str
) -> None:
    values = {
        "project": project.name,
        "file": str(write_jsonl(tmp_path / "ok.jsonl", [{"problem": "p", "steps": ["a"]}])),
        "missing": str(tmp_path / "missing.jsonl"),
        "unknown": str(write_jsonl(tmp_path / "odd.jsonl", [{"colour": "blue"}])),
    }

    with pytest.raises(CommandError, match=expected):
        run(*(arg.format(**values) for arg in args))
    assert counts() == (0, 0, 0, 0, 0)


def test_an_unknown_format_name_is_refused(project: Project, tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "ok.jsonl", [{"problem": "p", "steps": ["a"]}])

    with pytest.raises(CommandError, match="invalid choice: 'csv'"):
        run(project.name, str(path), "--format", "csv")


def test_failure_exits_non_zero_with_the_message_on_stderr(
    project: Project, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "bad.jsonl", ['{"problem": "p"'])

    with pytest.raises(SystemExit) as exit_info:
        execute_from_command_line(
            ["manage.py", "import_chains", project.name, str(path), "--format", "generic"]
        )

    assert exit_info.value.code == 1
    assert "line 1: " in capsys.readouterr().err
