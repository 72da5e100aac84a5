#!/usr/bin/env python
"""Export benchmark: steps/s and peak memory of `export_write` in every format, at two
project sizes, to show memory stays flat as the project grows.

    .venv/bin/python bench/bench_export.py [--sizes 100000,1000000] [--steps 10]
        [--database-url URL] [--keep-db [--reuse]]

For each size (step labels) it imports size/steps labeled chains through the real import
service (COPY), so the labels are import annotations that consensus uses by the
project's default "fallback" rule; freezes them with ``snapshot_create``; ANALYZEs the
tables (as autovacuum soon would); then exports the snapshot once per format, each in a
fresh child process so that process's peak RSS (VmHWM) is the export's alone, Django
and pyarrow included. Figures go to stdout as a table and to bench/out/export.json.
A measurement, not a test.

The database is recreated (its name must contain "bench", so a typo cannot drop real data)
and migrated with the dev settings.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/steplab_bench_export"
DEFAULT_OUT = REPO_ROOT / "bench" / "out" / "export.json"
FORMATS = ("trl", "prm800k", "processbench", "openrlhf", "qwen_prm", "csv", "parquet")


def _django(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.dev")
    sys.path.insert(0, str(REPO_ROOT))
    import django

    django.setup()


def _recreate_database(database_url: str) -> None:
    import psycopg
    from psycopg import sql

    parts = urlsplit(database_url)
    name = parts.path.lstrip("/")
    if "bench" not in name:
        raise SystemExit(f"refusing to recreate {name!r}: its name must contain 'bench'")
    admin = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin, autocommit=True) as conn:
        ident = sql.Identifier(name)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "config.settings.dev",
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=REPO_ROOT,
        env=env,
        check=True,
    )


def _write_labeled(path: Path, *, chains: int, steps: int, seed: int) -> None:
    """Generic JSONL with labels: mostly correct steps, some ambiguous, an error in ~40 %
    of chains (steps after it unlabeled, as in first_error mode)."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as out:
        for index in range(chains):
            labels: list[int | None] = []
            error_at = rng.randrange(steps) if rng.random() < 0.4 else None
            for s in range(steps):
                if error_at is not None and s > error_at:
                    labels.append(None)
                elif s == error_at:
                    labels.append(-1)
                else:
                    labels.append(0 if rng.random() < 0.05 else 1)
            record = {
                "problem": (
                    f"Problem {index} of seed {seed}: compute $\\sum_{{k=1}}^{{{index}}} k$."
                ),
                "steps": [
                    f"Step {s} of chain {index}: we rewrite the sum as $\\frac{{n(n+1)}}{{2}}$ "
                    f"and substitute n = {index + s}."
                    for s in range(steps)
                ],
                "answer": str(index),
                "labels": labels,
            }
            out.write(json.dumps(record) + "\n")


def _prepare(
    database_url: str, size: int, steps: int, workdir: Path, *, reuse: bool = False
) -> tuple[int, int, dict]:
    from annotation.datasets.imports import chain_import
    from annotation.datasets.snapshots import snapshot_create
    from annotation.models import Project, Snapshot

    chains = size // steps
    if reuse:
        # A snapshot of this size left by an earlier run (--keep-db --reuse): measuring the
        # export again need not import a million steps again.
        earlier = (
            Snapshot.objects.filter(
                project__name__startswith=f"bench export {size} ", counts__chains=chains
            )
            .order_by("-pk")
            .first()
        )
        if earlier is not None:
            return (
                earlier.project_id,
                earlier.version,
                {
                    "chains": chains,
                    "reused": True,
                    "snapshot_counts": earlier.counts,
                },
            )
    source = workdir / f"labeled-{size}.jsonl"
    _write_labeled(source, chains=chains, steps=steps, seed=size)
    project = Project.objects.create(name=f"bench export {size} {time.time_ns()}")
    started = time.perf_counter()
    chain_import(project=project, path=source, fmt="generic")
    imported = time.perf_counter() - started
    started = time.perf_counter()
    snapshot = snapshot_create(project=project, include_imported=True)
    frozen = time.perf_counter() - started
    source.unlink()
    # Autovacuum would analyze the fresh rows within a minute or so; do it now, so the
    # export is planned on real statistics, not on those of an empty table.
    from django.db import connection

    with connection.cursor() as cursor:
        for table in (
            "annotation_snapshotchain",
            "annotation_chain",
            "annotation_problem",
            "annotation_step",
        ):
            cursor.execute(f"ANALYZE {table}")
    return (
        project.pk,
        snapshot.version,
        {
            "chains": chains,
            "import_s": round(imported, 2),
            "snapshot_s": round(frozen, 2),
            "snapshot_counts": snapshot.counts,
        },
    )


def _process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process (Linux /proc), None elsewhere."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_kb() -> int:
    """This process's peak resident memory in KiB. VmHWM rather than ru_maxrss: Linux
    carries ru_maxrss over fork and exec, so a child of the parent that just imported a
    million steps would report the parent's peak, not its own."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _child(args: argparse.Namespace) -> None:
    _django(args.database_url)
    from django.db import connection

    from annotation.datasets.exports import export_write
    from annotation.models import Snapshot

    snapshot = Snapshot.objects.get(project_id=args.project, version=args.snapshot)
    out = Path(args.out)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (backend,) = cursor.fetchone()
    backend_before = _process_cpu_s(backend)
    cpu_before = time.process_time()
    started = time.perf_counter()
    result = export_write(snapshot=snapshot, fmt=args.format, path=out, ambiguous="positive")
    seconds = time.perf_counter() - started
    cpu_s = time.process_time() - cpu_before
    backend_after = _process_cpu_s(backend)
    # The PostgreSQL backend that served the export, when this machine runs it: with the
    # client's CPU it says what the export costs whatever the neighbours are doing.
    db_cpu_s = (
        backend_after - backend_before
        if backend_before is not None and backend_after is not None
        else None
    )
    busiest = max(cpu_s, db_cpu_s or 0.0)
    rss_kb = _peak_rss_kb()
    print(
        json.dumps(
            {
                "format": args.format,
                "load_average_1min": round(os.getloadavg()[0], 2),
                "cpu_s": round(cpu_s, 2),
                "db_cpu_s": None if db_cpu_s is None else round(db_cpu_s, 2),
                # Client and server run side by side: with a free core each, the export takes
                # about as long as the busier of the two.
                "steps_per_cpu_s": round(result.steps / busiest) if busiest else None,
                "records": result.records,
                "steps": result.steps,
                "seconds": round(seconds, 3),
                "steps_per_s": round(result.steps / seconds),
                "peak_rss_mb": round(rss_kb / 1024, 1),
                "bytes": out.stat().st_size,
            }
        )
    )
    out.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--formats", default=",".join(FORMATS))
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--keep-db", action="store_true")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --keep-db: export an earlier run's snapshot of each size, if any",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--project", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--snapshot", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--format", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args)
        return

    if not args.keep_db:
        _recreate_database(args.database_url)
    _django(args.database_url)
    results = []
    with tempfile.TemporaryDirectory(prefix="steplab-bench-export-") as tmp:
        workdir = Path(tmp)
        for size in (int(x) for x in args.sizes.split(",")):
            project_id, version, setup = _prepare(
                args.database_url, size, args.steps, workdir, reuse=args.reuse and args.keep_db
            )
            print(f"{size:>9,} labels: {setup}", flush=True)
            for fmt in args.formats.split(","):
                child = subprocess.run(
                    [
                        sys.executable,
                        __file__,
                        "--child",
                        "--database-url",
                        args.database_url,
                        "--project",
                        str(project_id),
                        "--snapshot",
                        str(version),
                        "--format",
                        fmt,
                        "--out",
                        str(workdir / f"export.{fmt}"),
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                figures = json.loads(child.stdout.strip().splitlines()[-1])
                figures["size"] = size
                results.append({**figures, "setup": setup})
                print(
                    f"  {fmt:<13} {figures['steps']:>9,} steps  {figures['seconds']:>7.2f} s  "
                    f"{figures['steps_per_s']:>9,} steps/s  "
                    f"peak {figures['peak_rss_mb']:>6.1f} MB  "
                    f"cpu {figures['cpu_s']:.2f} s + db {figures['db_cpu_s'] or 0:.2f} s  "
                    f"load {figures['load_average_1min']:.1f}",
                    flush=True,
                )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
