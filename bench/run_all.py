#!/usr/bin/env python
"""The benchmark suite in one command: runs every script in bench/ and prints one table.

    .venv/bin/python bench/run_all.py [--quick] [--only NAME,...] [--skip NAME,...]
        [--timeout 3600] [--list]

Each benchmark runs as its own process (its own sizes from the table below: the issue's
sizes by default, small ones with --quick), writes its JSON report to bench/out/, and
prints its own table, which is passed through as it runs. At the end this prints one
summary table: per benchmark its exit status, its wall time and its figures, taken from
its report (the "checks" rows where a script writes them, else its numeric fields), and
writes bench/out/suite.json. BENCHMARKS.md records a run of it with the machine.

Exit status 1 when any benchmark failed (a non-zero exit: a correctness check, not a
slow figure, except for scripts run with --strict by hand). A benchmark whose script is
missing is reported as such, not run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
OUT_DIR = BENCH_DIR / "out"
TITLE = "Steplab benchmark suite"


@dataclass(frozen=True)
class Bench:
    """One script of the suite: its arguments at full size and with --quick, and the JSON
    report it writes (relative to bench/out/)."""

    name: str
    script: str
    full: tuple[str, ...]
    quick: tuple[str, ...]
    report: str
    note: str = ""


SUITE: tuple[Bench, ...] = (
    Bench(
        "foundation",
        "bench_foundation.py",
        (),
        ("--quick",),
        "foundation.json",
        "import vs COPY; next/submit over gunicorn",
    ),
    Bench(
        "load",
        "bench_load.py",
        (),
        ("--chains", "20000", "--clients", "8", "--seconds", "10", "--warmup", "1"),
        "load.json",
        "64 annotators x 5 min at 1,000,000 chains",
    ),
    Bench(
        "export",
        "bench_export.py",
        ("--sizes", "100000,1000000"),
        ("--sizes", "10000"),
        "export.json",
        "every format at 100,000 and 1,000,000 labels",
    ),
    Bench(
        "export_under_load",
        "bench_export_under_load.py",
        (),
        ("--quick",),
        "export_under_load.json",
        "1,000,000-label export while annotators label",
    ),
    Bench(
        "faults",
        "bench_faults.py",
        (),
        ("--quick",),
        "faults.json",
        "PostgreSQL crash-restart during the load",
    ),
    Bench(
        "agreement",
        "bench_agreement.py",
        (),
        ("--annotations", "10000"),
        "agreement.json",
        "Krippendorff alpha at 100,000 annotations",
    ),
    Bench(
        "ml_round",
        "bench_ml_round.py",
        (),
        ("--labeled", "200", "--unlabeled", "2000", "--heldout", "50"),
        "ml_round.json",
        "one active-learning round",
    ),
    Bench(
        "prm_vs_rules",
        "bench_prm_vs_rules.py",
        (),
        ("--seeds", "3", "--chains", "150"),
        "prm_vs_rules.json",
        "default PRM against the baselines that read no step, 20 seeds",
    ),
    Bench(
        "prm_gpu",
        "bench_prm_gpu.py",
        # A CPU suite runs the tiny size; a GPU machine runs --size 1.5b / 7b by hand.
        ("--size", "tiny", "--chains", "32"),
        ("--size", "tiny", "--chains", "8", "--max-length", "256"),
        "prm_gpu.json",
        "the GPU node's path: features, scoring and LoRA (tiny shapes here)",
    ),
    Bench(
        "ml_scoring",
        "bench_ml_scoring.py",
        (),
        ("--chains", "100", "--repeats", "1"),
        "ml_scoring.json",
        "scoring tokens/s against a bare forward pass",
    ),
    Bench(
        "sampling_engine",
        "bench_sampling_engine.py",
        (),
        ("--prompts", "4", "--n", "2", "--max-new-tokens", "16", "--repeats", "1"),
        "sampling_engine.json",
        "sampling engine completions/s and tokens/s against a bare generate",
    ),
    Bench(
        "rollouts",
        "bench_rollouts.py",
        (),
        ("--steps", "3", "--n", "2", "--batch", "4", "--max-new-tokens", "8", "--repeats", "1"),
        "rollouts.json",
        "a chain's rollouts sharing the engine's batches against one step a call",
    ),
    Bench(
        "grading",
        "bench_grading.py",
        (),
        (),
        "grading.json",
        "math-verify against the old grader on the shared data's answer pairs",
    ),
    Bench(
        "chains",
        "bench_chains.py",
        (),
        ("--quick",),
        "chains.json",
        "the data manager's filtered pages at 1,000,000 chains",
    ),
    Bench(
        "demo_training",
        "bench_demo_training.py",
        (),
        ("--chains", "40"),
        "demo_training.json",
        "make demo: a run's answer, web and worker memory, cancel",
    ),
    Bench(
        "public_ids",
        "bench_public_ids.py",
        (),
        ("--pairs", "2000"),
        "public_ids.json",
        "public ids' CPU per next+submit pair against row ids",
    ),
    Bench(
        "attacks",
        "bench_attacks.py",
        (),
        ("--quick",),
        "attacks.json",
        "issue 22's attacks: status, bytes written, peak memory, seconds",
    ),
    Bench(
        "gold_timing",
        "bench_gold_timing.py",
        (),
        ("--real", "60", "--gold", "16"),
        "gold.json",
        "gold told apart by pooled ids and by request times (AUC, 95% intervals)",
    ),
    Bench(
        "workspace",
        "bench_workspace.py",
        (),
        ("--chains", "10"),
        "workspace.json",
        "submit to next chain rendered, in chromium",
    ),
    Bench(
        "workspace_keys",
        "bench_workspace_keys.py",
        (),
        ("--chains", "6"),
        "workspace_keys.json",
        "keys and seconds per chain, all-correct and step 3 wrong, in chromium",
    ),
    Bench(
        "consensus_fits",
        "bench_consensus_fits.py",
        (),
        ("--chains", "300", "--processes", "4"),
        "consensus_fits.json",
        "8 processes ask for one project's Dawid-Skene fit at once: fits run",
    ),
    Bench(
        "ab",
        "bench_ab.py",
        ("--a", "HEAD~1", "--b", "HEAD", "--json", "bench/out/ab.json"),
        (
            *("--a", "HEAD", "--b", "HEAD", "--rounds", "1", "--json", "bench/out/ab.json"),
            *("--", "--chains", "200", "--steps", "4", "--clients", "2", "--seconds", "1"),
        ),
        "ab.json",
        "the foundation bench on two commits, alternated: paired ratios B/A",
    ),
    Bench(
        "small_lm",
        "bench_small_lm.py",
        ("--json", "bench/out/small_lm.json"),
        (
            "--problems",
            "2",
            "--b1-problems",
            "1",
            "--max-new-tokens",
            "32",
            "--json",
            "bench/out/small_lm.json",
        ),
        "small_lm.json",
        "the packaged language model: load, memory, tokens/s, GSM8K solved",
    ),
    Bench(
        "machine_sources",
        "bench_machine_sources.py",
        ("--json", "bench/out/machine_sources.json"),
        (
            *("--chains", "2", "--rollouts", "1", "--max-new-tokens", "16"),
            *(
                "--judge-tokens",
                "16",
                "--sources",
                "judge",
                "--json",
                "bench/out/machine_sources.json",
            ),
        ),
        "machine_sources.json",
        "Monte-Carlo, judge and PRM first errors against ProcessBench's experts",
    ),
)


@dataclass
class Outcome:
    """What one benchmark did: exit status, time, and its figures as (metric, value,
    target, ok) rows."""

    name: str
    status: str  # "ok", "FAIL (exit N)", "timeout", "missing"
    seconds: float
    rows: list[tuple[str, str, str, bool | None]] = field(default_factory=list)
    command: str = ""


# --------------------------------------------------------------------------- figures


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _numeric_leaves(data: Any, prefix: str = "", depth: int = 0) -> list[tuple[str, Any]]:
    """Scalar fields of a report, nested keys joined with dots, two levels deep at most:
    the fallback for scripts that write no "checks" rows."""
    leaves: list[tuple[str, Any]] = []
    if isinstance(data, dict) and depth <= 2:
        for key, value in data.items():
            name = f"{prefix}{key}"
            if isinstance(value, bool | int | float) and value is not None:
                leaves.append((name, value))
            elif isinstance(value, dict):
                leaves += _numeric_leaves(value, f"{name}.", depth + 1)
    return leaves


# Issue #5's targets: steps/s for the JSON Lines formats, memory for all.
_EXPORT_TARGETS = {
    fmt: ">= 200,000 steps/s, < 300 MB" for fmt in ("trl", "prm800k", "processbench")
}


def report_figures(name: str, report: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """The rows the summary shows for one report.

    - a "checks" list of {metric, value, target, ok} (foundation, faults,
      export_under_load): used as is;
    - bench_export's "results": steps/s and peak memory per format and size;
    - anything else: its numeric fields (at most 12), so a new script shows up without
      a change here."""
    checks = report.get("checks")
    if isinstance(checks, list) and checks and isinstance(checks[0], dict):
        return [
            (
                str(c.get("metric", "")),
                str(c.get("value", "")),
                str(c.get("target", "")),
                c.get("ok"),
            )
            for c in checks
        ]
    if name == "export" and isinstance(report.get("results"), list):
        rows = []
        for r in report["results"]:
            rows.append(
                (
                    f"{r['format']} @ {r['size']:,} labels",
                    f"{r['steps_per_s']:,} steps/s, peak {r['peak_rss_mb']:.0f} MB",
                    _EXPORT_TARGETS.get(r["format"], "< 300 MB"),
                    None,
                )
            )
        return rows
    leaves = _numeric_leaves(report)
    if isinstance(checks, dict):
        leaves = [
            (f"checks.{k}", v) for k, v in checks.items() if isinstance(v, int | float)
        ] + leaves
    return [(metric, _fmt(value), "", None) for metric, value in leaves[:12]]


def summary_render(outcomes: Sequence[Outcome], *, machine: dict[str, Any]) -> str:
    """The one table: a block per benchmark, its status and time, then its figures."""
    rows: list[tuple[str, str, str, str]] = []
    for o in outcomes:
        rows.append((f"[{o.name}]", o.status, f"{o.seconds:.0f} s", ""))
        for metric, value, target, ok in o.rows:
            verdict = "" if ok is None else ("ok" if ok else "FAIL")
            rows.append((f"  {metric}", value, target, verdict))
    widths = [max([len(r[i]) for r in rows] + [6]) for i in range(3)]
    header = (
        f"{TITLE} on {machine['cpus']} CPUs ({machine['cpu_model']}), "
        f"{machine['ram_gb']} GB RAM, load {machine['load_average_1min']}"
    )
    lines = [header, "=" * len(header)]
    lines.append(
        f"{'benchmark / metric':<{widths[0]}}  {'value':>{widths[1]}}  "
        f"{'target / time':<{widths[2]}}"
    )
    for r in rows:
        lines.append(
            f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip()
        )
    return "\n".join(lines)


def machine_describe() -> dict[str, Any]:
    """CPUs, their model, RAM and load: the figures mean little without them."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    ram_gb: float | str = "?"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                ram_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "ram_gb": ram_gb,
        "python": sys.version.split()[0],
        "load_average_1min": round(os.getloadavg()[0], 2),
    }


# --------------------------------------------------------------------------- running


def bench_command(bench: Bench, *, quick: bool) -> list[str]:
    return [sys.executable, str(BENCH_DIR / bench.script), *(bench.quick if quick else bench.full)]


def bench_run(bench: Bench, *, quick: bool, timeout: float) -> Outcome:
    script = BENCH_DIR / bench.script
    command = bench_command(bench, quick=quick)
    shown = " ".join(["bench/" + bench.script, *command[2:]])
    if not script.exists():
        return Outcome(bench.name, "missing", 0.0, command=shown)
    report_path = OUT_DIR / bench.report
    before = report_path.stat().st_mtime if report_path.exists() else None
    print(f"\n### {bench.name}: {shown}", flush=True)
    started = time.monotonic()
    try:
        # Output passes straight through, so a long run shows its progress.
        result = subprocess.run(command, cwd=REPO_ROOT, timeout=timeout)
        status = "ok" if result.returncode == 0 else f"FAIL (exit {result.returncode})"
    except subprocess.TimeoutExpired:
        status = "timeout"
    seconds = time.monotonic() - started
    outcome = Outcome(bench.name, status, seconds, command=shown)
    fresh = report_path.exists() and report_path.stat().st_mtime != before
    if fresh:
        try:
            outcome.rows = report_figures(bench.name, json.loads(report_path.read_text()))
        except (ValueError, KeyError, TypeError) as exc:
            outcome.rows = [("report unreadable", repr(exc)[:80], "", False)]
    else:
        outcome.rows = [("report", f"no new {bench.report}", "", None)]
    return outcome


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes for every script")
    parser.add_argument("--only", default="", help="comma-separated names to run")
    parser.add_argument("--skip", default="", help="comma-separated names to leave out")
    parser.add_argument("--timeout", type=float, default=3600.0, help="per benchmark, s")
    parser.add_argument("--list", action="store_true", help="print the commands and stop")
    parser.add_argument("--out", type=Path, default=OUT_DIR / "suite.json")
    return parser.parse_args(argv)


def selected(args: argparse.Namespace) -> list[Bench]:
    names = {b.name for b in SUITE}
    only = {n for n in args.only.split(",") if n}
    skip = {n for n in args.skip.split(",") if n}
    unknown = (only | skip) - names
    if unknown:
        raise SystemExit(
            f"unknown benchmark(s): {', '.join(sorted(unknown))}; "
            f"known: {', '.join(b.name for b in SUITE)}"
        )
    return [b for b in SUITE if (not only or b.name in only) and b.name not in skip]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    benches = selected(args)
    if args.list:
        for bench in benches:
            command = bench_command(bench, quick=args.quick)
            print(f"{bench.name:<18} bench/{bench.script} {' '.join(command[2:])}".rstrip())
        return 0
    outcomes = [bench_run(b, quick=args.quick, timeout=args.timeout) for b in benches]
    machine = machine_describe()
    table = summary_render(outcomes, machine=machine)
    print("\n" + table, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "quick": args.quick,
                "machine": machine,
                "outcomes": [vars(o) for o in outcomes],
                "table": table,
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    return 0 if all(o.status in ("ok", "missing") for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
