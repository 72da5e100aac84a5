#!/usr/bin/env python
"""Fault benchmark: PostgreSQL restarted in the middle of the labeling load.

    .venv/bin/python bench/bench_faults.py [--chains 2000] [--steps 4] [--clients 4]
        [--seconds 20] [--restart-at 0.4] [--after 3] [--mode immediate|fast] [--quick]

It never touches a shared database server. It starts a private PostgreSQL cluster of its
own (initdb in a temporary folder, a free loopback port, run as the ``postgres`` user
when started as root), migrates it, imports chains, and serves the API from gunicorn
(production profile) on it. Clients, one annotator each, run next -> submit in a closed
loop; every submit carries a request id and is retried with the same body until it is
acknowledged (2xx), as the workspace does. Part-way through, the cluster is restarted
(``pg_ctl restart``, by default ``-m immediate``: a crash, with WAL recovery on start); the
load goes on until --seconds have passed and at least --after seconds past the restart.

It prints one table and writes bench/out/faults.json, then checks, in the database:

- every acknowledged submit is stored, exactly once (by annotator and request id);
- no annotator has two passes over one chain, and no chain more than its overlap;
- the clients saw the outage (errors) and got going again after it.

Exit status 1 when a check fails: those are bugs, not slowness. Loopback only; bounded
by --seconds (plus the restart and the set-up). Needs PostgreSQL's server binaries
(initdb, pg_ctl; Debian's postgresql-15 package) and fails with a clear message without.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from bench_foundation import (  # noqa: E402  (a sibling script, found through BENCH_DIR)
    _free_port,
    _tail,
    bench_database_prepare,
    bench_fixture_create,
    django_setup,
    gunicorn_running,
)

TITLE = "Steplab fault benchmark: PostgreSQL restart during load"
DEFAULT_OUT = REPO_ROOT / "bench" / "out" / "faults.json"
PG_BIN_CANDIDATES = ("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin")
# A client retries a failed request after this pause, doubling up to RETRY_MAX_S: fast
# enough to see the recovery time, slow enough not to hammer a server that is starting.
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 0.5


# --------------------------------------------------------------------------- cluster


def pg_bin_dir() -> Path:
    """The folder of initdb and pg_ctl: $PG_BIN, pg_config --bindir, or Debian's path."""
    candidates = [os.environ.get("PG_BIN", "")]
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.CalledProcessError):
            candidates.append(
                subprocess.run(
                    [pg_config, "--bindir"], capture_output=True, text=True, check=True
                ).stdout.strip()
            )
    candidates += list(PG_BIN_CANDIDATES)
    for candidate in candidates:
        if candidate and (Path(candidate) / "initdb").exists():
            return Path(candidate)
    raise SystemExit(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: install postgresql-15 or "
        "set PG_BIN to their folder. This benchmark needs a private cluster it may restart."
    )


@dataclass
class PrivateCluster:
    """A throw-away PostgreSQL cluster on a loopback port, owned by this benchmark."""

    bin_dir: Path
    data_dir: Path
    port: int
    log_path: Path
    as_user: tuple[str, ...]  # ("runuser", "-u", "postgres", "--") when we are root

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/steplab_bench_faults"

    def pg_ctl(self, *args: str, timeout: float = 120) -> None:
        command = [
            *self.as_user,
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.data_dir),
            "-l",
            str(self.log_path),
            "-w",
            "-t",
            str(int(timeout)),
            *args,
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout + 30)
        if result.returncode != 0:
            raise RuntimeError(
                f"pg_ctl {' '.join(args)} failed: {result.stdout}{result.stderr}\n"
                f"{_tail(self.log_path)}"
            )


@contextlib.contextmanager
def private_cluster(*, workdir: Path) -> Iterator[PrivateCluster]:
    """initdb, start, yield; always stopped (immediately) and deleted on the way out."""
    bin_dir = pg_bin_dir()
    as_user: tuple[str, ...] = ()
    if os.geteuid() == 0:  # initdb refuses root: run the cluster as "postgres"
        if shutil.which("runuser") is None:
            raise SystemExit("running as root needs runuser to start PostgreSQL as postgres")
        as_user = ("runuser", "-u", "postgres", "--")
    data_dir = workdir / "pgdata"
    log_path = workdir / "postgres.log"
    data_dir.mkdir(mode=0o700)
    log_path.touch()
    if as_user:
        shutil.chown(workdir, user="postgres")
        shutil.chown(data_dir, user="postgres")
        shutil.chown(log_path, user="postgres")
    subprocess.run(
        [
            *as_user,
            str(bin_dir / "initdb"),
            "-D",
            str(data_dir),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    cluster = PrivateCluster(
        bin_dir=bin_dir, data_dir=data_dir, port=_free_port(), log_path=log_path, as_user=as_user
    )
    with (data_dir / "postgresql.conf").open("a") as conf:
        # Durable commits (the default, said out loud): the point is that an acknowledged
        # submit survives a crash, which only fsync'd WAL promises.
        conf.write(
            f"\nlisten_addresses = '127.0.0.1'\nport = {cluster.port}\n"
            f"unix_socket_directories = '{data_dir}'\n"
            "fsync = on\nsynchronous_commit = on\nshared_buffers = 64MB\n"
            "max_connections = 60\n"
        )
    cluster.pg_ctl("start")
    try:
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.pg_ctl("stop", "-m", "immediate", timeout=60)
        shutil.rmtree(data_dir, ignore_errors=True)


# --------------------------------------------------------------------------- clients


@dataclass
class Ack:
    annotator: int  # client index
    request_id: str
    chain_id: int
    status: int
    at_s: float  # when the acknowledgement arrived, from the run's start


@dataclass
class RetryStats:
    pairs: int = 0
    acks: list[Ack] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    # (time, ok) of every request, relative to the run's start, for the recovery time
    timeline: list[tuple[float, bool]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # 4xx answers other than 409 races


class RetryingAnnotator:
    """One annotator on one loopback connection; retries a failed request (socket error,
    5xx) with the same body until it is answered, like the workspace's retry loop."""

    def __init__(self, *, index: int, port: int, token: str, project_id: int) -> None:
        self.index = index
        self.port = port
        self.headers = {
            "Authorization": f"Token {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        self.next_path = f"/api/v1/projects/{project_id}/assignments/next/"
        self.conn: http.client.HTTPConnection | None = None

    def _post_once(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            self.conn.request("POST", path, body=body, headers=self.headers)
            response = self.conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise

    def post(
        self,
        path: str,
        body: dict | None,
        *,
        stats: RetryStats,
        started: float,
        give_up_at: float,
    ) -> tuple[int, bytes] | None:
        """The first answer that is not a server error, or None at ``give_up_at``."""
        data = json.dumps(body).encode() if body is not None else b""
        pause = RETRY_FIRST_S
        while True:
            try:
                status, payload = self._post_once(path, data)
            except (OSError, http.client.HTTPException) as exc:
                stats.errors[f"socket {type(exc).__name__}"] += 1
                stats.timeline.append((time.monotonic() - started, False))
            else:
                ok = status < 500
                stats.timeline.append((time.monotonic() - started, ok))
                if ok:
                    return status, payload
                stats.errors[f"http {status}"] += 1
            if time.monotonic() >= give_up_at:
                return None
            time.sleep(pause)
            pause = min(pause * 2, RETRY_MAX_S)

    def pair(self, *, stats: RetryStats, started: float, give_up_at: float) -> bool:
        """next -> submit, each retried; False when the queue has nothing left."""
        answer = self.post(
            self.next_path, None, stats=stats, started=started, give_up_at=give_up_at
        )
        if answer is None:
            return True
        status, payload = answer
        if status == 204:
            return False
        if status != 200:
            stats.refused.append(f"next {status}: {payload[:200]!r}")
            return True
        lease = json.loads(payload)
        request_id = uuid.uuid4().hex
        body = {
            "ratings": [{"step": s["id"], "rating": 1} for s in lease["chain"]["steps"]],
            "request_id": request_id,
        }
        answer = self.post(
            f"/api/v1/assignments/{lease['assignment']['id']}/submit/",
            body,
            stats=stats,
            started=started,
            give_up_at=give_up_at,
        )
        if answer is None:
            return True
        status, payload = answer
        if status in (200, 201):
            stats.acks.append(
                Ack(
                    self.index, request_id, lease["chain"]["id"], status, time.monotonic() - started
                )
            )
            stats.pairs += 1
        else:
            stats.refused.append(f"submit {status}: {payload[:200]!r}")
        return True

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


# --------------------------------------------------------------------------- checks


def acknowledged_check(
    *,
    database_url: str,
    project_id: int,
    overlap: int,
    usernames: Sequence[str],
    acks: Sequence[Ack],
) -> dict[str, Any]:
    """What the database holds against what the clients were told, counted in SQL."""
    with psycopg.connect(database_url) as conn:
        stored = conn.execute(
            """
            SELECT u.username, a.request_id, a.chain_id
            FROM annotation_annotation a
            JOIN auth_user u ON u.id = a.annotator_id
            JOIN annotation_chain c ON c.id = a.chain_id
            WHERE c.project_id = %s AND a.source = 'human'
            """,
            [project_id],
        ).fetchall()
        twice = conn.execute(
            """
            SELECT count(*) FROM (
                SELECT a.annotator_id, a.chain_id FROM annotation_annotation a
                JOIN annotation_chain c ON c.id = a.chain_id
                WHERE c.project_id = %s AND a.source = 'human'
                GROUP BY a.annotator_id, a.chain_id HAVING count(*) > 1
            ) d
            """,
            [project_id],
        ).fetchone()[0]
        over = conn.execute(
            """
            SELECT count(*) FROM (
                SELECT a.chain_id FROM annotation_annotation a
                JOIN annotation_chain c ON c.id = a.chain_id
                WHERE c.project_id = %s AND a.source = 'human'
                GROUP BY a.chain_id HAVING count(DISTINCT a.annotator_id) > %s
            ) o
            """,
            [project_id, overlap],
        ).fetchone()[0]
    by_request = Counter((user, request_id) for user, request_id, _ in stored)
    acked = {(usernames[a.annotator], a.request_id): a for a in acks}
    lost = [key for key in acked if by_request[key] == 0]
    duplicated = [key for key in acked if by_request[key] > 1]
    return {
        "acknowledged": len(acked),
        "stored_human_annotations": len(stored),
        "lost_acknowledged": len(lost),
        "lost_examples": [list(k) for k in lost[:5]],
        "duplicated_acknowledged": len(duplicated),
        "stored_not_acknowledged": sum(
            count for key, count in by_request.items() if key not in acked
        ),
        "annotator_twice_on_a_chain": int(twice),
        "chains_over_overlap": int(over),
    }


# --------------------------------------------------------------------------- report


@dataclass(frozen=True)
class Row:
    metric: str
    value: str
    target: str = ""
    ok: bool | None = None


def report_rows(report: dict[str, Any]) -> list[Row]:
    load, integrity, restart = report["load"], report["integrity"], report["restart"]
    recovery = load.get("recovery_s")
    return [
        Row("clients x seconds", f"{load['clients']} x {load['seconds']:.1f}"),
        Row(
            "restart mode / pg_ctl restart took", f"{restart['mode']} / {restart['seconds']:.2f} s"
        ),
        Row("pairs acknowledged", f"{integrity['acknowledged']:,}"),
        Row(
            "pairs before / after the restart",
            f"{load['acks_before']:,} / {load['acks_after']:,}",
            "> 0 / > 0",
            load["acks_before"] > 0 and load["acks_after"] > 0,
        ),
        Row(
            "errors seen by clients (retried)",
            ", ".join(f"{k}: {v}" for k, v in sorted(load["errors"].items())) or "none",
            "> 0 (the outage is seen)",
            sum(load["errors"].values()) > 0,
        ),
        Row("first success after restart began", "-" if recovery is None else f"{recovery:.2f} s"),
        Row(
            "lost acknowledged submits",
            str(integrity["lost_acknowledged"]),
            "= 0",
            integrity["lost_acknowledged"] == 0,
        ),
        Row(
            "duplicated acknowledged submits",
            str(integrity["duplicated_acknowledged"]),
            "= 0",
            integrity["duplicated_acknowledged"] == 0,
        ),
        Row(
            "annotator twice on one chain",
            str(integrity["annotator_twice_on_a_chain"]),
            "= 0",
            integrity["annotator_twice_on_a_chain"] == 0,
        ),
        Row(
            "chains above overlap",
            str(integrity["chains_over_overlap"]),
            "= 0",
            integrity["chains_over_overlap"] == 0,
        ),
        Row("submits acknowledged on a replay (200)", str(load.get("acks_replayed", 0))),
        Row(
            "stored but never acknowledged",
            str(integrity["stored_not_acknowledged"]),
            "(a commit whose answer the restart cut; not a loss)",
        ),
        Row("refused answers (4xx)", str(len(load["refused"])), "= 0", not load["refused"]),
    ]


def table_render(*, title: str, rows: Sequence[Row]) -> str:
    """A plain-text table: metric, value, target, verdict."""
    widths = [
        max(len(r.metric) for r in rows),
        max(len(r.value) for r in rows),
        max(len(r.target) for r in rows),
    ]
    lines = [title, "-" * len(title)]
    for r in rows:
        verdict = "" if r.ok is None else ("ok" if r.ok else "FAIL")
        lines.append(
            f"{r.metric:<{widths[0]}}  {r.value:>{widths[1]}}  "
            f"{r.target:<{widths[2]}}  {verdict}".rstrip()
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def _write_chains(path: Path, *, chains: int, steps: int) -> None:
    with path.open("w", encoding="utf-8") as out:
        for i in range(chains):
            record = {
                "problem": f"Fault bench problem {i}: what is {i} + {i}?",
                "steps": [f"Step {s} of chain {i}: {i} + {i} = {2 * i}." for s in range(steps)],
                "answer": str(2 * i),
            }
            out.write(json.dumps(record) + "\n")


def _say(message: str) -> None:
    print(f"[faults] {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="steplab-faults-") as tmp:
        workdir = Path(tmp)
        os.chmod(workdir, 0o755)
        with private_cluster(workdir=workdir) as cluster:
            _say(f"private PostgreSQL on 127.0.0.1:{cluster.port}; migrating")
            bench_database_prepare(url=cluster.url, recreate=True)
            django_setup(cluster.url)
            from django.db import connections

            from annotation.datasets.imports import chain_import
            from annotation.labeling.queue.access import user_for_token

            fixture = bench_fixture_create(annotators=args.clients, overlap=args.overlap)
            source = workdir / "chains.jsonl"
            _write_chains(source, chains=args.chains, steps=args.steps)
            from annotation.models import Project

            chain_import(
                project=Project.objects.get(pk=fixture.project_id), path=source, fmt="generic"
            )
            usernames = [user_for_token(token)[0].username for token in fixture.tokens]
            connections.close_all()  # the restart would break it anyway
            _say(f"{args.chains} chains imported; gunicorn with {args.workers} workers")
            with gunicorn_running(
                database_url=cluster.url, workers=args.workers, log_path=workdir / "gunicorn.log"
            ) as (port, _pid):
                load = _load_with_restart(
                    args=args,
                    cluster=cluster,
                    port=port,
                    tokens=fixture.tokens,
                    project_id=fixture.project_id,
                )
                gunicorn_log = _tail(workdir / "gunicorn.log", 15)
            integrity = acknowledged_check(
                database_url=cluster.url,
                project_id=fixture.project_id,
                overlap=args.overlap,
                usernames=usernames,
                acks=load.pop("acks"),
            )
            postgres_log = _tail(cluster.log_path, 15)
    return {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "restart": load.pop("restart"),
        "load": load,
        "integrity": integrity,
        "gunicorn_log_tail": gunicorn_log,
        "postgres_log_tail": postgres_log,
    }


def _load_with_restart(
    *,
    args: argparse.Namespace,
    cluster: PrivateCluster,
    port: int,
    tokens: Sequence[str],
    project_id: int,
) -> dict[str, Any]:
    clients = [
        RetryingAnnotator(index=i, port=port, token=t, project_id=project_id)
        for i, t in enumerate(tokens)
    ]
    stats = [RetryStats() for _ in clients]
    started = time.monotonic()
    deadline = started + args.seconds
    # A pair begun before the deadline may retry this long to get its answer, so no
    # submit is left unacknowledged just because the clock ran out mid-outage.
    give_up_at = deadline + args.after + 120
    restart: dict[str, Any] = {"mode": args.mode}

    def running() -> bool:
        # Until --seconds have passed and, however long the restart took, --after seconds
        # of load have run on the restarted cluster: the point is to see it recover.
        now = time.monotonic()
        if now < deadline:
            return True
        done = restart.get("done_s")
        return done is None or now < started + done + args.after

    def loop(i: int) -> None:
        try:
            while running():
                if not clients[i].pair(stats=stats[i], started=started, give_up_at=give_up_at):
                    break
        finally:
            clients[i].close()

    def restarter() -> None:
        time.sleep(args.seconds * args.restart_at)
        restart["at_s"] = time.monotonic() - started
        _say(f"restarting PostgreSQL (-m {args.mode}) at {restart['at_s']:.1f} s")
        cluster.pg_ctl("restart", "-m", args.mode)
        restart["done_s"] = time.monotonic() - started
        restart["seconds"] = restart["done_s"] - restart["at_s"]

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(len(clients))]
    restart_thread = threading.Thread(target=restarter, daemon=True)
    for thread in [*threads, restart_thread]:
        thread.start()
    restart_thread.join(timeout=args.seconds + 180)
    for thread in threads:
        thread.join(timeout=args.seconds + 120)
    elapsed = time.monotonic() - started
    if "done_s" not in restart:
        raise RuntimeError(f"the restart did not finish: {restart}\n{_tail(cluster.log_path)}")

    acks = [ack for s in stats for ack in s.acks]
    timeline = sorted(point for s in stats for point in s.timeline)
    # Recovery: from the restart's start to the first answered request after the first
    # failed one.
    ok_after = [t for t, ok in timeline if ok and t >= restart["at_s"]]
    failed_after = [t for t, ok in timeline if not ok and t >= restart["at_s"]]
    first_ok_after_failure = next(
        (t for t in ok_after if failed_after and t > failed_after[0]), None
    )
    errors: Counter[str] = Counter()
    for s in stats:
        errors += s.errors
    return {
        "clients": len(clients),
        "seconds": elapsed,
        "acks": acks,
        "pairs": len(acks),
        "pairs_per_s": len(acks) / elapsed,
        # 200 instead of 201: a retried submit whose first try had committed, answered
        # from the stored annotation (the idempotent replay) rather than stored twice.
        "acks_replayed": sum(1 for ack in acks if ack.status == 200),
        "acks_before": sum(1 for ack in acks if ack.at_s < restart["at_s"]),
        "acks_after": sum(1 for ack in acks if ack.at_s >= restart["done_s"]),
        "errors": dict(errors),
        "recovery_s": (
            None if first_ok_after_failure is None else first_ok_after_failure - restart["at_s"]
        ),
        "refused": [r for s in stats for r in s.refused][:10],
        "restart": restart,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument("--overlap", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument(
        "--restart-at", type=float, default=0.4, help="when to restart, as a fraction of --seconds"
    )
    parser.add_argument(
        "--after",
        type=float,
        default=3.0,
        help="seconds of load at least after the restart has completed",
    )
    parser.add_argument(
        "--mode",
        choices=("immediate", "fast"),
        default="immediate",
        help="pg_ctl shutdown mode: immediate is a crash, fast a clean stop",
    )
    parser.add_argument(
        "--quick", action="store_true", help="small sizes: 2,000 chains, 2 clients, 8 s"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.quick:
        # Enough chains that 2 clients cannot finish the queue before the restart: with
        # 300, they labeled all 600 places in 3.2 s and the restart met an idle queue.
        args.chains, args.clients, args.seconds = 2000, 2, 8.0
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    rows = report_rows(report)
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
