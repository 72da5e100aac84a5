#!/usr/bin/env python
"""A/B of the foundation benchmark between two commits: each commit in a clone of its own,
run alternately A, B, A, B, ..., every figure compared as a paired ratio B/A.

    .venv/bin/python bench/bench_ab.py --a ccc077c --b f079831 [--rounds 3] \\
        [--database-url postgres://postgres@127.0.0.1:5432/steplab_bench_ab] [--json PATH] \\
        -- --chains 20000 --steps 10 --clients 1,16 --seconds 15

Name both commits. --a defaults to HEAD~1 and --b to HEAD, but a clone holds only what is
committed, never the working tree's edits, so the defaults rarely compare what one means.

What it does:

1. Clones this repository twice into a temporary folder (``git clone`` then a detached
   checkout; the repository itself is only read) and runs each clone's own
   ``bench/bench_foundation.py`` with PYTHONPATH set to that clone and this same Python,
   A on database ``<name>_a`` and B on ``<name>_b`` (the bench drops and recreates them,
   so ``<name>`` must contain "bench"). Arguments after ``--`` go to every run unchanged;
   --database-url and --out are this script's.
2. Alternates A, B for --rounds rounds, each run bounded by --timeout. Machine speed
   drifts within minutes, so only a ratio taken within one round is trusted: B/A is the
   geometric mean of the rounds' ratios, with a 95 % t interval on their logarithms.
3. Where pg_stat_statements is loaded, resets it for the run's database just before each
   measured phase (the bench's ``load_run`` with a CPU meter) and reads it right after,
   so the statements per pair cover the measured window only; a bench without that hook
   is read once at the end, over the whole run, and the report says so.
4. Prints one table (stdout), the top statements per round, and with --json the same in
   JSON; deletes the clones and both databases unless --keep.

It exits 1 when a run failed, timed out or reported a correctness failure (non-2xx
answers, lost submits, chains over overlap); a slow figure is never a failure.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import inspect
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/steplab_bench_ab"
TITLE = "Steplab A/B of bench/bench_foundation.py"
# The argument that turns this script into the process that runs one clone's bench.
CLONE_RUN_FLAG = "--run-clone"
# Arguments of bench_foundation.py that this script sets per run.
OWNED_BENCH_ARGS = ("--database-url", "--out")
STATEMENTS_KEPT = 25
QUERY_CHARS = 400

# Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom.
T_975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t_975(df: int) -> float:
    if df <= len(T_975):
        return T_975[df - 1]
    # Cornish-Fisher's first correction to the normal quantile: within 0.002 past 30 df.
    return 1.96 + 2.37 / df


# --------------------------------------------------------------------------- the clone's run


def clone_run_main(argv: Sequence[str]) -> int:
    """Runs the clone's bench_foundation.py in this process: ``CLONE STATEMENTS_OUT
    BENCH_ARGS...``; STATEMENTS_OUT empty for no pg_stat_statements."""
    clone_arg, statements_arg, *bench_argv = argv
    clone = Path(clone_arg).resolve()
    # sys.path[0] is this script's folder, whose bench_foundation is the working tree's,
    # not the commit's.
    sys.path[0] = str(clone / "bench")
    if str(clone) not in sys.path:
        sys.path.insert(1, str(clone))
    for name in ("bench_foundation", "annotation", "config"):
        spec = importlib.util.find_spec(name)
        origin = Path(spec.origin).resolve() if spec and spec.origin else None
        # The venv's editable install maps these packages to the working tree; PYTHONPATH
        # must win, or B would silently measure the working tree.
        if origin is None or not origin.is_relative_to(clone):
            raise SystemExit(f"{name} resolves to {origin}, not inside {clone}")
    # The parent stops a run past its timeout with SIGTERM; raising lets the bench's own
    # cleanup (gunicorn in a session of its own) run, which a plain SIGTERM would skip.
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    bench = importlib.import_module("bench_foundation")
    statements_out = Path(statements_arg) if statements_arg else None
    whole_run = False
    database_url = _arg_value(bench_argv, "--database-url") or DEFAULT_DATABASE_URL
    if statements_out is not None:
        whole_run = not _statements_hook(bench, statements_out, database_url)
    if whole_run:
        # A database the bench recreates starts empty anyway; one kept with --keep-db
        # would carry the last run's statements.
        with contextlib.suppress(Exception):
            statements_reset(database_url)
    code = int(bench.main(bench_argv))
    if statements_out is not None and whole_run:
        read = statements_read(database_url)
        _json_write(statements_out, [{"clients": None, "scope": "whole run", **read}])
    return code


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _arg_value(argv: Sequence[str], name: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def _statements_hook(bench: Any, out: Path, database_url: str) -> bool:
    """Wraps the bench's load_run so pg_stat_statements covers each measured phase alone.
    False when the bench has no load_run taking a meter, the mark of its measured phase."""
    original = getattr(bench, "load_run", None)
    if original is None or "meter" not in inspect.signature(original).parameters:
        return False
    phases: list[dict[str, Any]] = []

    def load_run(**kwargs: Any) -> dict[str, Any]:
        if kwargs.get("meter") is None:  # a warm-up
            return dict(original(**kwargs))
        statements_reset(database_url)
        result = dict(original(**kwargs))
        read = statements_read(database_url)
        phases.append({"clients": result["clients"], "pairs": result["pairs"], **read})
        phases[-1]["scope"] = "measured phase"
        _json_write(out, phases)
        return result

    bench.load_run = load_run
    return True


def _statements_dbid_sql() -> str:
    return "(SELECT oid FROM pg_database WHERE datname = current_database())"


def statements_reset(database_url: str) -> None:
    """Resets this database's statements only: a reset of every database's would wipe
    what anyone else on the server is measuring."""
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute(f"SELECT pg_stat_statements_reset(dbid => {_statements_dbid_sql()})")


def statements_read(database_url: str) -> dict[str, Any]:
    import psycopg

    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        rows = conn.execute(
            "SELECT queryid::text, sum(calls)::bigint, sum(total_exec_time)::float8,"
            " sum(rows)::bigint, sum(shared_blks_hit + shared_blks_read)::bigint,"
            f" min(left(query, {QUERY_CHARS * 2}))"
            f" FROM pg_stat_statements WHERE dbid = {_statements_dbid_sql()}"
            # This script's own reset and read are no part of what the bench measures.
            " AND query NOT LIKE '%pg_stat_statements%'"
            " GROUP BY queryid ORDER BY 3 DESC"
        ).fetchall()
    statements = [
        {
            "queryid": queryid,
            "calls": int(calls),
            "total_ms": float(total_ms),
            "rows": int(n_rows),
            "blocks": int(blocks),
            "query": re.sub(r"\s+", " ", query or "").strip()[:QUERY_CHARS],
        }
        for queryid, calls, total_ms, n_rows, blocks, query in rows
    ]
    return {
        "total_ms": sum(s["total_ms"] for s in statements),
        "calls": sum(s["calls"] for s in statements),
        "statements": statements[:STATEMENTS_KEPT],
    }


def _json_write(path: Path, data: object) -> None:
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class AbConfig:
    a: str
    b: str
    rounds: int
    timeout: float
    database_url: str
    bench_args: tuple[str, ...]
    json_out: Path | None
    keep: bool
    workdir: Path | None
    top: int
    statements: bool


def config_from_argv(argv: Sequence[str]) -> AbConfig:
    argv = list(argv)
    ours, bench_args = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--a", default="HEAD~1", help="commit A, the baseline (HEAD~1)")
    parser.add_argument("--b", default="HEAD", help="commit B, the change (HEAD)")
    parser.add_argument("--rounds", type=int, default=3, help="A, B pairs to run (3)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per run (1800)")
    parser.add_argument(
        "--database-url",
        default=DEFAULT_DATABASE_URL,
        help="base URL; A runs on <name>_a and B on <name>_b, both dropped and recreated",
    )
    parser.add_argument("--json", type=Path, dest="json_out", help="write the report here")
    parser.add_argument("--keep", action="store_true", help="keep the clones and databases")
    parser.add_argument("--workdir", type=Path, help="parent folder of the temporary folder")
    parser.add_argument("--top", type=int, default=5, help="statements shown per run (5)")
    parser.add_argument(
        "--no-statements", action="store_true", help="leave pg_stat_statements alone"
    )
    args = parser.parse_args(ours)
    if args.rounds < 1 or args.timeout <= 0:
        parser.error("--rounds and --timeout must be positive")
    for arg in bench_args:
        name = arg.split("=", 1)[0]
        # The bench's argparse takes unambiguous prefixes, so a prefix counts as the name.
        if len(name) > 3 and any(full.startswith(name) for full in OWNED_BENCH_ARGS):
            parser.error(f"{name} after -- is set per run by this script; use its own option")
    dbname = urlsplit(args.database_url).path.lstrip("/")
    if "bench" not in dbname:
        parser.error(f"database {dbname!r}: the name must contain 'bench' (it is dropped)")
    return AbConfig(
        a=args.a,
        b=args.b,
        rounds=args.rounds,
        timeout=args.timeout,
        database_url=args.database_url,
        bench_args=tuple(bench_args),
        json_out=args.json_out,
        keep=args.keep,
        workdir=args.workdir,
        top=max(0, args.top),
        statements=not args.no_statements,
    )


# --------------------------------------------------------------------------- clones


@dataclass
class Side:
    label: str  # "A" or "B"
    rev: str
    sha: str
    subject: str
    database_url: str
    clone: Path = field(default=Path())

    @property
    def short(self) -> str:
        return self.sha[:7]


def _git(*args: str, cwd: Path = REPO_ROOT) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def side_resolve(*, label: str, rev: str, database_url: str) -> Side:
    try:
        sha = _git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except subprocess.CalledProcessError:
        raise SystemExit(f"--{label.lower()} {rev!r} is no commit of {REPO_ROOT}") from None
    parts = urlsplit(database_url)
    url = urlunsplit(parts._replace(path=f"/{parts.path.lstrip('/')}_{label.lower()}"))
    subject = _git("log", "-1", "--format=%s", sha)
    return Side(label=label, rev=rev, sha=sha, subject=subject, database_url=url)


def clone_make(side: Side, directory: Path) -> None:
    """A clone, not a worktree: a worktree would add to the repository's own git state."""
    subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(directory)], check=True)
    subprocess.run(
        ["git", "-C", str(directory), "checkout", "-q", "--detach", side.sha], check=True
    )
    side.clone = directory


def statements_available(database_url: str) -> str | None:
    """None when pg_stat_statements can be read, else why not."""
    import psycopg

    parts = urlsplit(database_url)
    try:
        with psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as c:
            row = c.execute("SHOW shared_preload_libraries").fetchone()
    except psycopg.Error as exc:
        return f"cannot ask the server: {exc}"
    if not row or "pg_stat_statements" not in row[0]:
        return "pg_stat_statements is not in shared_preload_libraries"
    return None


def databases_drop(sides: Sequence[Side]) -> None:
    import psycopg
    from psycopg import sql

    for side in sides:
        parts = urlsplit(side.database_url)
        dbname = parts.path.lstrip("/")
        if "bench" not in dbname:
            continue
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(urlunsplit(parts._replace(path="/postgres")), autocommit=True) as c,
        ):
            c.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(dbname))
            )


# --------------------------------------------------------------------------- one run


@dataclass
class RunResult:
    round: int
    side: str
    sha: str
    returncode: int | None  # None: stopped at the timeout
    seconds: float
    report: dict[str, Any] | None
    statements: list[dict[str, Any]] | None
    stderr_tail: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.report is not None


def run_one(
    *, side: Side, round_no: int, cfg: AbConfig, runs_dir: Path, statements: bool
) -> RunResult:
    stem = f"round{round_no}_{side.label}"
    report_path = runs_dir / f"{stem}.json"
    statements_path = runs_dir / f"{stem}_statements.json" if statements else None
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        CLONE_RUN_FLAG,
        str(side.clone),
        str(statements_path or ""),
        *cfg.bench_args,
        "--database-url",
        side.database_url,
        "--out",
        str(report_path),
    ]
    env = {**os.environ, "PYTHONPATH": str(side.clone)}
    started = time.perf_counter()
    stdout_path, stderr_path = runs_dir / f"{stem}.out", runs_dir / f"{stem}.err"
    with stdout_path.open("wb") as out, stderr_path.open("wb") as err:
        # A session of its own, so a timeout can stop the migrate subprocess with it.
        proc = subprocess.Popen(
            command, cwd=side.clone, env=env, stdout=out, stderr=err, start_new_session=True
        )
        returncode: int | None
        try:
            returncode = proc.wait(timeout=cfg.timeout)
        except subprocess.TimeoutExpired:
            returncode = None
            _session_stop(proc)
        except BaseException:
            _session_stop(proc)
            raise
    seconds = time.perf_counter() - started
    report = _json_read(report_path) if report_path.exists() else None
    found = _json_read(statements_path) if statements_path and statements_path.exists() else None
    return RunResult(
        round=round_no,
        side=side.label,
        sha=side.sha,
        returncode=returncode,
        seconds=seconds,
        report=report if isinstance(report, dict) else None,
        statements=found if isinstance(found, list) else None,
        stderr_tail="\n".join(stderr_path.read_text(errors="replace").splitlines()[-15:]),
    )


def _session_stop(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait_s in ((signal.SIGTERM, 60.0), (signal.SIGKILL, 15.0)):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait_s)


def _json_read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- figures


def _at(clients: int) -> str:
    return f"@{clients} client{'s' if clients > 1 else ''}"


def statements_per_pair(run: RunResult) -> dict[int | None, dict[str, Any]]:
    """Per client count (None: the whole run), statement time and the top statements, per
    pair. A whole-run read counts every pair, warm-ups included."""
    found: dict[int | None, dict[str, Any]] = {}
    for phase in run.statements or []:
        pairs = phase.get("pairs")
        if pairs is None and run.report is not None:
            pairs = sum(
                p["pairs"] + p.get("warmup", {}).get("pairs", 0) for p in run.report["http"]
            )
        if not pairs:
            continue
        found[phase.get("clients")] = {
            "scope": phase.get("scope"),
            "pairs": pairs,
            "ms_per_pair": phase["total_ms"] / pairs,
            "calls_per_pair": phase["calls"] / pairs,
            "top": [
                {**s, "ms_per_pair": s["total_ms"] / pairs, "calls_per_pair": s["calls"] / pairs}
                for s in phase["statements"]
            ],
        }
    return found


def figures_of(run: RunResult) -> dict[str, float | None]:
    """The run's figures by name, in the table's order."""
    figures: dict[str, float | None] = {}
    report = run.report
    if report is None:
        return figures
    statements = statements_per_pair(run)
    for phase in report["http"]:
        c = phase["clients"]
        at = _at(c)
        figures[f"pairs/s {at}"] = phase["pairs_per_s"]
        for kind in ("next", "submit"):
            for q in ("p50", "p95"):
                figures[f"{kind} {q} ms {at}"] = phase[f"{kind}_ms"].get(q)
        cpu = phase.get("cpu_ms_per_pair") or {}
        figures[f"PostgreSQL CPU ms/pair {at}"] = cpu.get("postgres")
        figures[f"Django CPU ms/pair {at}"] = cpu.get("django")
        if c in statements:
            figures[f"statements ms/pair {at}"] = statements[c]["ms_per_pair"]
    if None in statements:
        figures["statements ms/pair, whole run"] = statements[None]["ms_per_pair"]
    imported, copy = report.get("import") or {}, report.get("copy") or {}
    if imported.get("steps_per_s") and copy.get("steps_per_s"):
        figures["import / COPY"] = imported["steps_per_s"] / copy["steps_per_s"]
        figures["import steps/s"] = imported["steps_per_s"]
        figures["COPY steps/s"] = copy["steps_per_s"]
    return figures


def correctness_of(report: dict[str, Any]) -> dict[str, int]:
    phases = report["http"]
    integrity = report["integrity"]
    return {
        "non_2xx": sum(p["non_2xx"] + p["warmup"]["non_2xx"] for p in phases),
        "lost_submits": report["submits_ok_total"] - integrity["human_annotations"],
        "chains_over_overlap": integrity["chains_over_overlap"],
    }


@dataclass(frozen=True)
class Paired:
    a: list[float | None]
    b: list[float | None]
    a_mean: float | None
    b_mean: float | None
    ratio: float | None
    low: float | None
    high: float | None
    n: int


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def paired_ratio(a: list[float | None], b: list[float | None]) -> Paired:
    """Geometric mean of the rounds' B/A and a t interval on the log ratios: the log makes
    a ratio and its inverse symmetric, and pairing by round removes the drift between
    rounds, which on a shared machine is larger than most effects."""
    logs = [math.log(y / x) for x, y in zip(a, b, strict=True) if x and y and x > 0 and y > 0]
    n = len(logs)
    ratio = low = high = None
    if n:
        centre = statistics.fmean(logs)
        ratio = math.exp(centre)
        if n >= 2:
            half = t_975(n - 1) * statistics.stdev(logs) / math.sqrt(n)
            low, high = math.exp(centre - half), math.exp(centre + half)
    return Paired(a, b, _mean(a), _mean(b), ratio, low, high, n)


def compare(runs: Sequence[RunResult], rounds: int) -> dict[str, Paired]:
    by_key = {(r.round, r.side): figures_of(r) for r in runs}
    names: list[str] = []
    for figures in by_key.values():
        names += [n for n in figures if n not in names]
    table = {}
    for name in names:
        a = [by_key.get((i, "A"), {}).get(name) for i in range(1, rounds + 1)]
        b = [by_key.get((i, "B"), {}).get(name) for i in range(1, rounds + 1)]
        table[name] = paired_ratio(a, b)
    return table


# --------------------------------------------------------------------------- report


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _ratio(value: float) -> str:
    return f"{value:.3f}" if 0.01 <= value < 1000 else f"{value:.3g}"


def table_render(table: dict[str, Paired]) -> str:
    head = ("figure", "A mean", "B mean", "B/A", "95 % interval", "A by round", "B by round")
    rows = [head, tuple("---" for _ in head)]
    for name, p in table.items():
        interval = "-" if p.low is None or p.high is None else f"{_ratio(p.low)} - {_ratio(p.high)}"
        rows.append(
            (
                name,
                _num(p.a_mean),
                _num(p.b_mean),
                "-" if p.ratio is None else _ratio(p.ratio),
                interval,
                ", ".join(map(_num, p.a)),
                ", ".join(map(_num, p.b)),
            )
        )
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def statements_render(runs: Sequence[RunResult], sides: dict[str, Side], top: int) -> str:
    lines = []
    for run in runs:
        for clients, found in statements_per_pair(run).items():
            where = "whole run, warm-ups and import included" if clients is None else _at(clients)
            lines.append(
                f"round {run.round} {run.side} {sides[run.side].short} {where}: "
                f"{found['ms_per_pair']:.2f} ms of statements per pair, "
                f"{found['calls_per_pair']:.1f} calls per pair"
            )
            for s in found["top"][:top]:
                lines.append(
                    f"  {s['ms_per_pair']:8.3f} ms/pair {s['calls_per_pair']:6.2f} calls/pair"
                    f"  {s['query'][:110]}"
                )
    return "\n".join(lines)


def header_render(*, sides: Sequence[Side], cfg: AbConfig, loads: Sequence[float]) -> str:
    bench = " ".join(cfg.bench_args) or "(bench defaults)"
    lines = [
        f"{TITLE}: {cfg.rounds} round(s) of A, B; bench arguments: {bench}",
        *(f"{s.label} = {s.short} ({s.rev}): {s.subject}" for s in sides),
        f"{os.cpu_count()} CPUs, load average (1 min) {min(loads):.1f}-{max(loads):.1f} "
        f"over the runs, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
    ]
    return "\n".join(lines)


def _say(message: str) -> None:
    print(f"[ab] {message}", file=sys.stderr, flush=True)


def _run_summary(run: RunResult) -> str:
    if run.report is None:
        return "no report"
    return ", ".join(
        f"{_at(p['clients'])} {p['pairs_per_s']:.1f} pairs/s" for p in run.report["http"]
    )


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [CLONE_RUN_FLAG]:
        return clone_run_main(argv[1:])
    cfg = config_from_argv(argv)
    sides = [
        side_resolve(label="A", rev=cfg.a, database_url=cfg.database_url),
        side_resolve(label="B", rev=cfg.b, database_url=cfg.database_url),
    ]
    unavailable = statements_available(cfg.database_url) if cfg.statements else "not asked"
    if unavailable and cfg.statements:
        _say(f"no statements per pair: {unavailable}")
    if cfg.workdir is not None:
        cfg.workdir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="steplab-ab-", dir=cfg.workdir))
    runs_dir = workdir / "runs"
    runs_dir.mkdir()
    runs: list[RunResult] = []
    loads = [os.getloadavg()[0]]
    try:
        for side in sides:
            _say(f"cloning {side.label} = {side.short} ({side.rev}) into {workdir}")
            clone_make(side, workdir / side.label.lower())
        for round_no in range(1, cfg.rounds + 1):
            for side in sides:
                _say(f"round {round_no}/{cfg.rounds}: {side.label} {side.short} running")
                run = run_one(
                    side=side,
                    round_no=round_no,
                    cfg=cfg,
                    runs_dir=runs_dir,
                    statements=not unavailable,
                )
                runs.append(run)
                loads.append(os.getloadavg()[0])
                state = "timed out" if run.returncode is None else f"rc {run.returncode}"
                _say(
                    f"round {round_no} {side.label}: {run.seconds:.0f} s, {state}, "
                    f"{_run_summary(run)}"
                )
                if not run.ok:
                    _say(f"stderr of the run:\n{run.stderr_tail}")
        return _report(cfg=cfg, sides=sides, runs=runs, loads=loads, unavailable=unavailable)
    finally:
        if cfg.keep:
            _say(f"kept the clones and run files in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
            databases_drop(sides)


def _report(
    *,
    cfg: AbConfig,
    sides: Sequence[Side],
    runs: Sequence[RunResult],
    loads: Sequence[float],
    unavailable: str | None,
) -> int:
    table = compare(runs, cfg.rounds)
    by_label = {s.label: s for s in sides}
    text = [header_render(sides=sides, cfg=cfg, loads=loads), "", table_render(table), ""]
    text.append(
        "B/A: geometric mean of the rounds' ratios; 95 % interval: t on the log ratios "
        "(none with one round)."
    )
    failed = [r for r in runs if not r.ok]
    broken: list[str] = []
    for run in runs:
        if run.report is not None:
            counts = correctness_of(run.report)
            if any(counts.values()):
                broken.append(f"round {run.round} {run.side}: {counts}")
    text.append(
        "correctness: "
        + (
            "; ".join(broken)
            if broken
            else "0 non-2xx answers, 0 lost submits, 0 chains over overlap in every run"
        )
    )
    for run in failed:
        state = "timed out" if run.returncode is None else f"exited {run.returncode}"
        text.append(f"round {run.round} {run.side}: {state}, excluded from its round's ratio")
    statements = statements_render(runs, by_label, cfg.top) if cfg.top else ""
    if statements:
        scopes = {found["scope"] for r in runs for found in statements_per_pair(r).values()}
        text += ["", f"Top statements by total time per pair ({', '.join(sorted(scopes))}):"]
        text.append(statements)
    elif unavailable and cfg.statements:
        text += ["", f"No statements per pair: {unavailable}."]
    rendered = "\n".join(text)
    print(rendered, flush=True)
    if cfg.json_out is not None:
        cfg.json_out.parent.mkdir(parents=True, exist_ok=True)
        _json_write(cfg.json_out, _report_json(cfg, sides, runs, loads, table, rendered))
        _say(f"wrote {cfg.json_out}")
    return 1 if failed or broken else 0


def _report_json(
    cfg: AbConfig,
    sides: Sequence[Side],
    runs: Sequence[RunResult],
    loads: Sequence[float],
    table: dict[str, Paired],
    rendered: str,
) -> dict[str, Any]:
    def run_json(run: RunResult) -> dict[str, Any]:
        report = run.report or {}
        return {
            "round": run.round,
            "side": run.side,
            "sha": run.sha,
            "returncode": run.returncode,
            "seconds": run.seconds,
            "figures": figures_of(run),
            "correctness": correctness_of(report) if report else None,
            "load_average_1min": [p.get("load_average_1min") for p in report.get("http", [])],
            "table": report.get("table"),
            "statements": {str(k): v for k, v in statements_per_pair(run).items()},
            "stderr_tail": None if run.ok else run.stderr_tail,
        }

    return {
        "title": TITLE,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "load_average_1min": list(loads)},
        "sides": [{k: str(v) for k, v in vars(s).items() if k != "clone"} for s in sides],
        "rounds": cfg.rounds,
        "bench_args": list(cfg.bench_args),
        "figures": {name: {k: v for k, v in vars(p).items()} for name, p in table.items()},
        "runs": [run_json(r) for r in runs],
        "table": rendered,
    }


if __name__ == "__main__":
    sys.exit(main())
