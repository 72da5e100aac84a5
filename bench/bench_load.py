#!/usr/bin/env python
"""Load benchmark (issue 6): many simulated annotators claim and submit against gunicorn and
PostgreSQL for minutes, then the database is checked for what must never happen.

    .venv/bin/python bench/bench_load.py [--chains 1000000] [--steps 10] [--clients 64]
        [--seconds 300] [--overlap 2] [--workers 2] [--database-url URL] [--keep-db]

It prints one table (requests/s; next and submit p50/p95/p99; lost submits, chains above
their overlap, chains leased twice to one annotator, 5xx answers) and writes the same
figures to bench/out/load.json. It exits 1 when any correctness count is not 0; a slow
figure never fails it.

What it does, in order:

1. Recreates a dedicated PostgreSQL database (its name must contain "bench") and migrates
   it, as ``bench_foundation`` does; --keep-db reuses it and adds a fresh project.
2. Fills the project with N chains x S steps straight through COPY into the real tables
   (the importer's own ``import_copy.CopyTable``, ids reserved from the sequences), since
   timing the import is ``bench_foundation``'s job and a million chains through it would
   take long.
3. VACUUM ANALYZEs, starts gunicorn (production profile, DEBUG off, a Redis broker so a
   submit enqueues the auto-training check as in production), and runs one closed loop of
   next -> submit per simulated annotator, each with its own token and connection.
4. Counts in the database: every acknowledged submit is stored, no chain has more human
   annotations or live leases than its overlap, no annotator holds two leases or two
   annotations of one chain.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_foundation import (  # noqa: E402 - the sibling script, found through sys.path
    REPO_ROOT,
    WEB_THREADS,
    CpuMeter,
    QueueClient,
    bench_database_prepare,
    bench_fixture_create,
    chain_content,
    database_settle,
    django_setup,
    gunicorn_running,
    load_run,
    table_text,
)

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/steplab_bench_load"
DEFAULT_BROKER_URL = "redis://127.0.0.1:6379/10"
DEFAULT_OUT = REPO_ROOT / "bench" / "out" / "load.json"
TITLE = "Steplab load benchmark"
TARGET_NEXT_P95_MS = 20.0  # issue 6, at 1,000,000 chains
COPY_BATCH_CHAINS = 50_000


@dataclass(frozen=True)
class LoadConfig:
    chains: int
    steps: int
    clients: int
    seconds: float
    warmup_seconds: float
    overlap: int
    think_ms: float
    workers: int
    database_url: str
    broker_url: str
    keep_db: bool
    out: Path


def config_from_argv(argv: Sequence[str] | None = None) -> LoadConfig:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chains", type=int, default=1_000_000, help="chains in the project")
    parser.add_argument("--steps", type=int, default=10, help="steps per chain")
    parser.add_argument("--clients", type=int, default=64, help="simulated annotators")
    parser.add_argument("--seconds", type=float, default=300.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=5.0, help="unmeasured seconds first")
    parser.add_argument("--overlap", type=int, default=2, help="annotators per chain")
    parser.add_argument(
        "--think-ms",
        type=float,
        default=0.0,
        help="mean time an annotator grades a chain between next and submit (exponential); "
        "0: none, a closed stress loop",
    )
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument(
        "--broker-url",
        default=os.environ.get("BENCH_CELERY_BROKER_URL", DEFAULT_BROKER_URL),
        help="Celery broker for the server ('': a folder broker under var/broker/ that no "
        "worker reads; nothing is enqueued unless a project retrains automatically)",
    )
    parser.add_argument("--keep-db", action="store_true", help="reuse the database as it is")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON report path")
    args = parser.parse_args(argv)
    if min(args.chains, args.steps, args.clients, args.overlap, args.workers) < 1:
        parser.error("--chains, --steps, --clients, --overlap and --workers must be positive")
    if args.think_ms < 0:
        parser.error("--think-ms cannot be negative")
    return LoadConfig(
        chains=args.chains,
        steps=args.steps,
        clients=args.clients,
        seconds=args.seconds,
        warmup_seconds=args.warmup,
        overlap=args.overlap,
        think_ms=args.think_ms,
        workers=args.workers,
        database_url=args.database_url,
        broker_url=args.broker_url,
        keep_db=args.keep_db,
        out=args.out,
    )


# --------------------------------------------------------------------------- data


def _reserve_ids(cursor: Any, table: str, count: int) -> int:
    """The first of ``count`` consecutive ids taken from ``table``'s sequence."""
    cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
    (sequence,) = cursor.fetchone()
    cursor.execute("SELECT nextval(%s::regclass)", [sequence])
    (first,) = cursor.fetchone()
    cursor.execute("SELECT setval(%s::regclass, %s)", [sequence, first + count - 1])
    return int(first)


def chains_copy(*, project_id: int, chains: int, steps: int) -> dict[str, float]:
    """COPY ``chains`` chains of ``steps`` steps (and a problem each) into the project, in
    batches of one transaction each, with the importer's column handling (every NOT NULL
    column the bench does not set gets the model's default)."""
    from django.db import connection, transaction

    from annotation.datasets.import_copy import CopyTable
    from annotation.models import Chain, Problem, Step

    now = datetime.now(UTC)
    tables = {
        "problem": CopyTable(
            Problem, ("id", "project_id", "text", "content_hash"), now=now, db=connection
        ),
        "chain": CopyTable(
            Chain,
            ("id", "project_id", "problem_id", "content_hash", "final_answer", "step_count"),
            now=now,
            db=connection,
        ),
        "step": CopyTable(Step, ("chain_id", "index", "text"), now=now, db=connection),
    }
    started = time.perf_counter()
    with connection.cursor() as django_cursor:
        cursor = django_cursor.cursor  # psycopg's own, for COPY
        problem_base = _reserve_ids(cursor, Problem._meta.db_table, chains)
        chain_base = _reserve_ids(cursor, Chain._meta.db_table, chains)
    tag = f"load-{project_id}"
    for start in range(0, chains, COPY_BATCH_CHAINS):
        batch = range(start, min(chains, start + COPY_BATCH_CHAINS))
        contents = [chain_content(index=i + 1, steps=steps) for i in batch]
        with transaction.atomic(), connection.cursor() as django_cursor:
            cursor = django_cursor.cursor
            tables["problem"].copy(
                cursor,
                (
                    (problem_base + i, project_id, problem, f"{tag}-p{i}")
                    for i, (problem, _texts, _answer) in zip(batch, contents, strict=True)
                ),
            )
            tables["chain"].copy(
                cursor,
                (
                    (chain_base + i, project_id, problem_base + i, f"{tag}-c{i}", answer, steps)
                    for i, (_problem, _texts, answer) in zip(batch, contents, strict=True)
                ),
            )
            tables["step"].copy(
                cursor,
                (
                    (chain_base + i, k, text)
                    for i, (_problem, texts, _answer) in zip(batch, contents, strict=True)
                    for k, text in enumerate(texts)
                ),
            )
        _say(f"copied {batch.stop:,} / {chains:,} chains")
    elapsed = time.perf_counter() - started
    return {"seconds": elapsed, "steps_per_s": chains * steps / elapsed if elapsed else 0.0}


# --------------------------------------------------------------------------- load


class RecordingClient(QueueClient):
    """A QueueClient that keeps the id of every annotation a 2xx submit answered with, so
    the check afterwards can look each one up."""

    def __init__(self, *, annotation_ids: list[int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.annotation_ids = annotation_ids

    def post(self, path: str, body: dict | None) -> tuple[int, bytes, float]:
        status, payload, ms = super().post(path, body)
        if path.endswith("/submit/") and status // 100 == 2:
            self.annotation_ids.append(int(json.loads(payload)["annotation"]["id"]))
        return status, payload, ms


def load_measure(
    *,
    port: int,
    tokens: Sequence[str],
    project_id: int,
    seconds: float,
    meter: CpuMeter | None,
    think_ms: float = 0.0,
) -> tuple[dict, list[int]]:
    """``bench_foundation.load_run`` with recording clients: (figures, acknowledged ids)."""
    acknowledged: list[int] = []  # list.append is atomic under the GIL

    def make(**kwargs: Any) -> RecordingClient:
        return RecordingClient(annotation_ids=acknowledged, **kwargs)

    figures = load_run(
        port=port,
        tokens=tokens,
        project_id=project_id,
        seconds=seconds,
        meter=meter,
        client_factory=make,
        think_ms=think_ms,
    )
    return figures, acknowledged


def server_errors(figures: dict) -> int:
    """Answers with a 5xx status (``non_2xx_by_kind`` keys look like "submit 503")."""
    count = 0
    for kind, n in figures["non_2xx_by_kind"].items():
        parts = kind.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[1].startswith("5"):
            count += n
    return count


# --------------------------------------------------------------------------- checks

_CHECKS_SQL = {
    # Acknowledged ids (a parameter) with no row: a lost submit.
    "lost_submits": """
        SELECT count(*) FROM unnest(%(acknowledged)s::bigint[]) AS ack(id)
        WHERE NOT EXISTS (SELECT 1 FROM annotation_annotation n WHERE n.id = ack.id)
    """,
    # More human annotations, or finished plus live leases, than the overlap allows; only
    # chains the load touched (ever leased) can be.
    "chains_above_overlap": """
        SELECT count(*) FROM annotation_chain c
        WHERE c.id IN (
            SELECT a.chain_id FROM annotation_assignment a WHERE a.project_id = %(project)s
        ) AND (
            (SELECT count(DISTINCT n.annotator_id) FROM annotation_annotation n
              WHERE n.chain_id = c.id AND n.source = 'human') > %(overlap)s
            OR c.finished_count + (
                SELECT count(*) FROM annotation_assignment a
                WHERE a.chain_id = c.id AND a.status = 'active' AND a.expires_at > now()
            ) > %(overlap)s
        )
    """,
    # One annotator with two leases (other than expired ones) or two annotations of a chain.
    "chains_leased_twice_to_one_annotator": """
        SELECT count(*) FROM (
            SELECT a.chain_id, a.annotator_id FROM annotation_assignment a
            WHERE a.project_id = %(project)s AND a.status <> 'expired'
            GROUP BY a.chain_id, a.annotator_id HAVING count(*) > 1
            UNION
            SELECT n.chain_id, n.annotator_id FROM annotation_annotation n
            JOIN annotation_chain c ON c.id = n.chain_id
            WHERE c.project_id = %(project)s AND n.source = 'human'
            GROUP BY n.chain_id, n.annotator_id HAVING count(*) > 1
        ) AS twice
    """,
    "human_annotations": """
        SELECT count(*) FROM annotation_annotation n JOIN annotation_chain c ON c.id = n.chain_id
        WHERE c.project_id = %(project)s AND n.source = 'human'
    """,
}


def integrity_check(
    *, database_url: str, project_id: int, overlap: int, acknowledged: Sequence[int]
) -> dict[str, int]:
    params = {"project": project_id, "overlap": overlap, "acknowledged": list(acknowledged)}
    with psycopg.connect(database_url, autocommit=True) as conn:
        return {
            name: int(conn.execute(query, params).fetchone()[0])
            for name, query in _CHECKS_SQL.items()
        }


# --------------------------------------------------------------------------- report


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def table_render(report: dict) -> str:
    cfg, phase, checks = report["config"], report["load"], report["checks"]
    nxt, sub = phase["next_ms"], phase["submit_ms"]
    p95 = nxt["p95"]
    rows: list[tuple[str, str, str, str]] = [
        ("requests/s (next + submit)", f"{phase['requests'] / phase['seconds']:,.1f}", "", ""),
        ("next+submit pairs/s", f"{phase['pairs_per_s']:,.1f}", "", ""),
        (
            "next ms p50/p95/p99",
            f"{_ms(nxt['p50'])} / {_ms(p95)} / {_ms(nxt['p99'])}",
            f"p95 < {TARGET_NEXT_P95_MS:g} ms",
            "" if p95 is None else ("✓" if p95 < TARGET_NEXT_P95_MS else "✗"),
        ),
        (
            "submit ms p50/p95/p99",
            f"{_ms(sub['p50'])} / {_ms(sub['p95'])} / {_ms(sub['p99'])}",
            "",
            "",
        ),
    ]
    per_pair, cpu = phase.get("cpu_ms_per_pair"), phase.get("cpu_s")
    if per_pair:
        rows.append(
            (
                "CPU ms/pair: django/pg/client",
                f"{per_pair['django']:.1f} / {per_pair['postgres']:.1f} / {per_pair['client']:.1f}",
                "",
                "",
            )
        )
    if cpu and cpu.get("machine_busy") is not None:
        rows.append(
            (
                "machine CPU busy (others)",
                f"{cpu['machine_busy']:.0%} ({cpu['others'] / cpu['capacity']:.0%})",
                "",
                "",
            )
        )
    rows.append(("acknowledged submits", f"{len(report['acknowledged_ids']):,}", "", ""))
    for label, value in (
        ("lost submits (2xx, not stored)", checks["lost_submits"]),
        ("chains above overlap", checks["chains_above_overlap"]),
        ("chains leased twice to one annotator", checks["chains_leased_twice_to_one_annotator"]),
        ("5xx answers", report["server_errors"]),
        ("other non-2xx answers / errors", report["other_failures"]),
    ):
        rows.append((label, f"{value:,}", "= 0", "✓" if value == 0 else "✗"))
    header = (
        f"{TITLE}: {cfg['chains']:,} chains x {cfg['steps']} steps, overlap {cfg['overlap']}, "
        f"{cfg['clients']} annotators, "
        + (f"grading {cfg['think_ms']:g} ms a chain (mean), " if cfg.get("think_ms") else "")
        + f"{cfg['seconds']:g} s, gunicorn {cfg['workers']} gthread workers x "
        f"{WEB_THREADS} threads, {os.cpu_count()} CPUs, {report['postgres']}"
    )
    cells = [("metric", "value", "target", "ok"), *rows]
    return table_text(header=header, cells=cells)


def _say(message: str) -> None:
    print(f"[bench-load] {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    cfg = config_from_argv(argv)
    _say(f"preparing database {urlsplit(cfg.database_url).path.lstrip('/')}")
    bench_database_prepare(url=cfg.database_url, recreate=not cfg.keep_db)
    django_setup(cfg.database_url)
    fixture = bench_fixture_create(annotators=cfg.clients, overlap=cfg.overlap)
    _say(f"COPYing {cfg.chains:,} chains x {cfg.steps} steps into project {fixture.project_id}")
    data = chains_copy(project_id=fixture.project_id, chains=cfg.chains, steps=cfg.steps)
    _say(f"data in {data['seconds']:.0f} s; VACUUM ANALYZE")
    database_settle(database_url=cfg.database_url)

    from django.db import connections

    connections.close_all()
    with tempfile.TemporaryDirectory(prefix="steplab-load-") as tmp:
        with gunicorn_running(
            database_url=cfg.database_url,
            workers=cfg.workers,
            log_path=Path(tmp) / "g.log",
            broker_url=cfg.broker_url,
        ) as (port, gunicorn_pid):
            meter = CpuMeter(gunicorn_pid=gunicorn_pid, database_url=cfg.database_url)
            _say(f"{cfg.clients} annotators: warm-up {cfg.warmup_seconds:g} s")
            warmup, warm_ids = load_measure(
                port=port,
                tokens=fixture.tokens,
                project_id=fixture.project_id,
                seconds=cfg.warmup_seconds,
                meter=None,
                think_ms=cfg.think_ms,
            )
            _say(f"measuring {cfg.seconds:g} s")
            phase, ids = load_measure(
                port=port,
                tokens=fixture.tokens,
                project_id=fixture.project_id,
                seconds=cfg.seconds,
                meter=meter,
                think_ms=cfg.think_ms,
            )
            phase["load_average_1min"] = os.getloadavg()[0]
        server_log = (Path(tmp) / "g.log").read_text(errors="replace").splitlines()[-20:]

    acknowledged = warm_ids + ids
    checks = integrity_check(
        database_url=cfg.database_url,
        project_id=fixture.project_id,
        overlap=cfg.overlap,
        acknowledged=acknowledged,
    )
    errors_5xx = server_errors(phase) + server_errors(warmup)
    other = phase["non_2xx"] + warmup["non_2xx"] - errors_5xx
    with psycopg.connect(cfg.database_url) as conn:
        postgres = "PostgreSQL " + conn.execute("SHOW server_version").fetchone()[0].split()[0]
    report = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(cfg).items()},
        "postgres": postgres,
        "data": data,
        "warmup": {k: warmup[k] for k in ("pairs", "non_2xx", "non_2xx_by_kind", "failures")},
        "load": phase,
        "acknowledged_ids": acknowledged,
        "checks": checks,
        "server_errors": errors_5xx,
        "other_failures": other,
        "server_log_tail": server_log,
    }
    table = table_render(report)
    report["table"] = table
    print(table, flush=True)
    for failure in phase["failures"] + warmup["failures"]:
        _say(f"failure: {failure}")
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    report_out = {**report, "acknowledged_ids": len(acknowledged)}
    cfg.out.write_text(json.dumps(report_out, indent=2, default=str) + "\n")
    _say(f"wrote {cfg.out}")
    bad = (
        checks["lost_submits"],
        checks["chains_above_overlap"],
        checks["chains_leased_twice_to_one_annotator"],
        errors_5xx,
        other,
    )
    return 1 if any(bad) else 0


if __name__ == "__main__":
    sys.exit(main())
