#!/usr/bin/env python
"""Export during labeling: a 1,000,000-label export while annotators claim and submit.

    .venv/bin/python bench/bench_export_under_load.py [--labels 1000000] [--steps 10]
        [--clients 4] [--seconds 15] [--format trl] [--quick] [--database-url URL]

One project holds labels/steps labeled chains (imported with their labels, frozen in a
snapshot) that annotators also work on. Under gunicorn (production profile) on loopback,
``--clients`` annotators run next -> submit in a closed loop twice, ``--seconds`` each:
first alone (the baseline), then while the snapshot is exported back to back in a child
process (``export_write``, as the command and the endpoint do). Meanwhile a sampler reads
``pg_stat_activity`` every 0.2 s for the oldest open transaction in the database.

It prints a table and writes bench/out/export_under_load.json. Checks:

- claim throughput with the export >= half of the baseline (target of issue #6);
- no transaction open for more than 60 s;
- every export of the snapshot is byte-identical to the one taken before the load (a
  snapshot is immutable, whatever labeling goes on);
- no non-2xx answer and no chain above its overlap.

Exit 1 when a correctness check fails; the throughput ratio fails the run only with
--strict (on a shared 2-core machine it is a measurement, not a verdict).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psycopg

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from bench_export import _peak_rss_kb, _write_labeled  # noqa: E402  (sibling scripts)
from bench_faults import Row, table_render  # noqa: E402
from bench_foundation import (  # noqa: E402
    _tail,
    bench_database_prepare,
    bench_fixture_create,
    database_settle,
    django_setup,
    gunicorn_running,
    load_run,
    queue_integrity_check,
)

TITLE = "Steplab export during labeling"
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/steplab_bench_export_load"
DEFAULT_OUT = REPO_ROOT / "bench" / "out" / "export_under_load.json"
TARGET_RATIO = 0.5
MAX_TRANSACTION_S = 60.0
SAMPLE_EVERY_S = 0.2


def _export_child(args: argparse.Namespace) -> None:
    """One export in this (child) process: its figures and the file's SHA-256 as JSON."""
    django_setup(args.database_url)
    from annotation.datasets.exports import export_write
    from annotation.models import Snapshot

    snapshot = Snapshot.objects.get(pk=args.snapshot_id)
    out = Path(args.export_out)
    started = time.perf_counter()
    result = export_write(snapshot=snapshot, fmt=args.format, path=out)
    seconds = time.perf_counter() - started
    digest = hashlib.sha256()
    with out.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    out.unlink()
    print(
        json.dumps(
            {
                "steps": result.steps,
                "records": result.records,
                "seconds": seconds,
                "steps_per_s": result.steps / seconds if seconds else None,
                "peak_rss_mb": _peak_rss_kb() / 1024,
                "sha256": digest.hexdigest(),
            }
        )
    )


def _export_once(args: argparse.Namespace, *, snapshot_id: int, workdir: Path) -> dict:
    command = [
        sys.executable,
        __file__,
        "--export-child",
        "--database-url",
        args.database_url,
        "--snapshot-id",
        str(snapshot_id),
        "--format",
        args.format,
        "--export-out",
        str(workdir / f"export-{time.time_ns()}"),
    ]
    child = subprocess.run(
        command, cwd=REPO_ROOT, check=True, capture_output=True, text=True, timeout=600
    )
    return json.loads(child.stdout.strip().splitlines()[-1])


class TransactionSampler:
    """The oldest open transaction in the database, sampled every SAMPLE_EVERY_S."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.max_age_s = 0.0
        self.max_query = ""
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            while not self._stop.is_set():
                row = conn.execute(
                    """
                    SELECT extract(epoch FROM now() - xact_start), left(query, 120)
                    FROM pg_stat_activity
                    WHERE datname = current_database() AND xact_start IS NOT NULL
                      AND pid <> pg_backend_pid()
                    ORDER BY xact_start LIMIT 1
                    """
                ).fetchone()
                self.samples += 1
                if row is not None and float(row[0]) > self.max_age_s:
                    self.max_age_s, self.max_query = float(row[0]), row[1]
                self._stop.wait(SAMPLE_EVERY_S)

    def __enter__(self) -> TransactionSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def _say(message: str) -> None:
    print(f"[export-under-load] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    bench_database_prepare(url=args.database_url, recreate=not args.keep_db)
    django_setup(args.database_url)
    from django.db import connections

    from annotation.datasets.imports import chain_import
    from annotation.datasets.snapshots import snapshot_create
    from annotation.models import Project

    fixture = bench_fixture_create(annotators=args.clients, overlap=args.overlap)
    project = Project.objects.get(pk=fixture.project_id)
    with tempfile.TemporaryDirectory(prefix="steplab-export-load-") as tmp:
        workdir = Path(tmp)
        source = workdir / "labeled.jsonl"
        chains = args.labels // args.steps
        _say(f"importing {chains:,} labeled chains x {args.steps} steps")
        _write_labeled(source, chains=chains, steps=args.steps, seed=args.labels)
        chain_import(project=project, path=source, fmt="generic")
        source.unlink()
        snapshot = snapshot_create(project=project, include_imported=True)
        connections.close_all()
        database_settle(database_url=args.database_url)
        _say("reference export before the load")
        reference = _export_once(args, snapshot_id=snapshot.pk, workdir=workdir)

        with gunicorn_running(
            database_url=args.database_url, workers=args.workers, log_path=workdir / "gunicorn.log"
        ) as (port, _pid):
            tokens, project_id = fixture.tokens, fixture.project_id
            load_run(port=port, tokens=tokens, project_id=project_id, seconds=args.warmup)
            with TransactionSampler(args.database_url) as sampler:
                _say(f"baseline: {args.clients} clients for {args.seconds:g} s")
                baseline = load_run(
                    port=port, tokens=tokens, project_id=project_id, seconds=args.seconds
                )
                exports: list[dict] = []
                stop = threading.Event()
                failures: list[str] = []

                def exporter() -> None:
                    try:
                        while not stop.is_set():
                            exports.append(
                                _export_once(args, snapshot_id=snapshot.pk, workdir=workdir)
                            )
                    except Exception as exc:  # reported in the table, fails the run
                        failures.append(repr(exc)[:500])

                _say(f"with exports: {args.clients} clients for {args.seconds:g} s")
                thread = threading.Thread(target=exporter, daemon=True)
                thread.start()
                time.sleep(args.export_lead)  # let the first export's query get going
                loaded = load_run(
                    port=port, tokens=tokens, project_id=project_id, seconds=args.seconds
                )
                stop.set()
                thread.join(timeout=600)
            gunicorn_log = _tail(workdir / "gunicorn.log", 15)

    integrity = queue_integrity_check(project_id=fixture.project_id, overlap=args.overlap)
    return {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "snapshot": {"id": snapshot.pk, "counts": snapshot.counts},
        "reference_export": reference,
        "exports": exports,
        "export_failures": failures,
        "baseline": baseline,
        "with_export": loaded,
        "max_transaction_s": sampler.max_age_s,
        "max_transaction_query": sampler.max_query,
        "transaction_samples": sampler.samples,
        "integrity": integrity,
        "gunicorn_log_tail": gunicorn_log,
        "load_average_1min": os.getloadavg()[0],
    }


def report_rows(report: dict[str, Any], *, strict: bool = False) -> list[Row]:
    base, loaded = report["baseline"], report["with_export"]
    exports, reference = report["exports"], report["reference_export"]
    ratio = loaded["pairs_per_s"] / base["pairs_per_s"] if base["pairs_per_s"] else 0.0
    same = bool(exports) and all(e["sha256"] == reference["sha256"] for e in exports)
    export_rate = (
        sum(e["steps"] for e in exports) / sum(e["seconds"] for e in exports) if exports else 0
    )
    return [
        Row(
            "snapshot steps labeled",
            f"{report['snapshot']['counts']['steps_labeled']:,}",
        ),
        Row("claims/s baseline", f"{base['pairs_per_s']:.1f}"),
        Row("claims/s during export", f"{loaded['pairs_per_s']:.1f}"),
        Row(
            "ratio during / baseline",
            f"{ratio:.2f}",
            f">= {TARGET_RATIO}",
            ratio >= TARGET_RATIO if strict else None if ratio < TARGET_RATIO else True,
        ),
        Row(
            "next p95 ms baseline / during",
            f"{base['next_ms']['p95'] or 0:.1f} / {loaded['next_ms']['p95'] or 0:.1f}",
        ),
        Row("exports during the window", str(len(exports)), ">= 1", bool(exports)),
        Row("export steps/s during load", f"{export_rate:,.0f}"),
        Row("export steps/s alone (before)", f"{reference['steps_per_s']:,.0f}"),
        Row("every export identical to the reference", "yes" if same else "NO", "yes", same),
        Row(
            "longest open transaction",
            f"{report['max_transaction_s']:.1f} s",
            f"< {MAX_TRANSACTION_S:g} s",
            report["max_transaction_s"] < MAX_TRANSACTION_S,
        ),
        Row(
            "non-2xx answers",
            str(base["non_2xx"] + loaded["non_2xx"]),
            "= 0",
            base["non_2xx"] + loaded["non_2xx"] == 0,
        ),
        Row(
            "export failures",
            str(len(report["export_failures"])),
            "= 0",
            not report["export_failures"],
        ),
        Row(
            "chains above overlap",
            str(report["integrity"]["chains_over_overlap"]),
            "= 0",
            report["integrity"]["chains_over_overlap"] == 0,
        ),
    ]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labels", type=int, default=1_000_000, help="steps in the snapshot")
    parser.add_argument("--steps", type=int, default=10, help="steps per chain")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--overlap", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=15.0, help="each load window")
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--export-lead", type=float, default=0.3, help=argparse.SUPPRESS)
    parser.add_argument("--format", default="trl")
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument("--strict", action="store_true", help="fail on the throughput ratio")
    parser.add_argument(
        "--quick", action="store_true", help="small sizes: 20,000 labels, 2 clients, 3 s windows"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--export-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--snapshot-id", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--export-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.labels, args.clients, args.seconds, args.warmup = 20_000, 2, 3.0, 0.5
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.export_child:
        _export_child(args)
        return 0
    report = run(args)
    rows = report_rows(report, strict=args.strict)
    table = table_render(title=TITLE, rows=rows)
    report["checks"] = [vars(r) for r in rows]
    report["table"] = table
    print(table, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    _say(f"wrote {args.out}")
    return 1 if any(r.ok is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
