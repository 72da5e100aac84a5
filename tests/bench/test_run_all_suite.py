"""The suite runner's table assembly and selection (bench/run_all.py).

Running the whole suite, even with --quick, takes minutes (gunicorn, chromium, MiniLM),
far over what a CI smoke test should spend; each script has its own smoke or reliability
test. Here: the figures a report turns into, the one table, --only/--skip, and --list
naming a command for every script that exists in bench/.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "bench" / "run_all.py"


@pytest.fixture(scope="module")
def run_all() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_run_all", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_checks_rows_are_shown_as_written(run_all) -> None:
    # Given a report with "checks" rows, as bench_faults writes them
    report = {
        "checks": [
            {"metric": "lost acknowledged submits", "value": "0", "target": "= 0", "ok": True},
            {"metric": "pairs acknowledged", "value": "59", "target": "", "ok": None},
        ],
        "load": {"pairs": 59},
    }

    # When it becomes the summary's rows, then they are the checks, in order
    assert run_all.report_figures("faults", report) == [
        ("lost acknowledged submits", "0", "= 0", True),
        ("pairs acknowledged", "59", "", None),
    ]


def test_export_results_become_one_row_per_format_and_size(run_all) -> None:
    report = {
        "results": [
            {"format": "trl", "size": 1_000_000, "steps_per_s": 412_345, "peak_rss_mb": 66.7},
            {"format": "csv", "size": 100_000, "steps_per_s": 91_698, "peak_rss_mb": 81.3},
        ]
    }

    rows = run_all.report_figures("export", report)

    assert [row[0] for row in rows] == ["trl @ 1,000,000 labels", "csv @ 100,000 labels"]
    assert rows[0][1] == "412,345 steps/s, peak 67 MB"


def test_other_reports_show_their_numeric_fields(run_all) -> None:
    # Given a report shaped like no other (a new script), with nested and text fields
    report = {
        "median_ms": 41.5,
        "chains": 50,
        "note": "text is left out",
        "timing": {"p95_ms": 80.25},
        "checks": {"lost_submits": 0},
    }

    rows = run_all.report_figures("workspace", report)

    assert ("checks.lost_submits", "0", "", None) in rows
    assert ("median_ms", "41.5", "", None) in rows
    assert ("timing.p95_ms", "80.2", "", None) in rows
    assert all(row[0] != "note" for row in rows)


def test_the_summary_is_one_table_with_the_machine_and_every_verdict(run_all) -> None:
    outcomes = [
        run_all.Outcome("faults", "ok", 41.2, [("lost acknowledged submits", "0", "= 0", True)]),
        run_all.Outcome(
            "export", "FAIL (exit 1)", 300.0, [("trl @ 1,000,000 labels", "1 steps/s", "", False)]
        ),
        run_all.Outcome("load", "missing", 0.0),
    ]
    machine = {"cpus": 2, "cpu_model": "Test CPU", "ram_gb": 23.4, "load_average_1min": 0.5}

    table = run_all.summary_render(outcomes, machine=machine)

    lines = table.splitlines()
    assert lines[0].startswith("Steplab benchmark suite on 2 CPUs (Test CPU), 23.4 GB RAM")
    assert any(line.startswith("[faults]") and "ok" in line and "41 s" in line for line in lines)
    assert any("lost acknowledged submits" in line and line.endswith("ok") for line in lines)
    assert any(line.startswith("[export]") and "FAIL (exit 1)" in line for line in lines)
    assert any("trl @ 1,000,000 labels" in line and line.endswith("FAIL") for line in lines)
    assert any(line.startswith("[load]") and "missing" in line for line in lines)


def test_only_and_skip_select_and_unknown_names_are_refused(run_all) -> None:
    args = run_all.parse_args(["--only", "export,faults", "--skip", "faults"])
    assert [b.name for b in run_all.selected(args)] == ["export"]
    with pytest.raises(SystemExit, match="unknown benchmark"):
        run_all.selected(run_all.parse_args(["--only", "exprot"]))


def test_list_names_a_command_for_every_script_in_bench(run_all) -> None:
    # Given every bench_*.py script in bench/
    scripts = sorted(p.name for p in (REPO_ROOT / "bench").glob("bench_*.py"))

    # When the suite lists its quick commands
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--list", "--quick"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )

    # Then each script is run by the suite, with its quick sizes
    assert result.returncode == 0, result.stderr
    listed = result.stdout
    missing = [s for s in scripts if f"bench/{s}" not in listed]
    assert not missing, f"run_all.py does not run {missing}"
    assert "bench/bench_export.py --sizes 10000" in listed
