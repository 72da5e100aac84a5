#!/usr/bin/env python
"""Foundation benchmark: how fast Steplab imports chains, against PostgreSQL's own COPY
of the same rows, and how fast the labeling queue answers over HTTP under gunicorn.

    .venv/bin/python bench/bench_foundation.py [--chains 100000] [--steps 10]
        [--clients 1,16] [--seconds 20] [--overlap 2] [--quick] [--database-url URL]

It prints one table and writes the same figures to bench/out/foundation.json. It is a
measurement, not a test: nothing here fails on a slow figure unless --strict is given.
It exits 1 when any HTTP request got a non-2xx answer or a submit went missing, since
those are bugs, not slowness.

What it does, in order:

1. Recreates a dedicated PostgreSQL database (its name must contain "bench", so a typo
   cannot drop real data) and migrates it with the dev settings, so every run measures
   the same state; --keep-db reuses it and only adds a fresh project.
2. Writes N chains x S steps as generic JSONL to a temporary folder, streamed, and in the
   same pass the same rows in COPY text format for the baseline.
3. COPYs those rows into scratch tables shaped like the real ones (same columns, indexes,
   unique and foreign-key constraints, logged), then runs ``chain_import`` on the JSONL.
4. VACUUM ANALYZEs, starts gunicorn with the production profile (DEBUG off), and for each
   client count runs a closed loop of next -> submit, one annotator and one keep-alive
   connection per client, on 127.0.0.1 only, for a fixed time.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import math
import os
import random
import re
import resource
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/steplab_bench"
DEFAULT_OUT = REPO_ROOT / "bench" / "out" / "foundation.json"
TITLE = "Steplab foundation benchmark"

# Request threads per gunicorn worker, as the Makefile's `web` target runs it.
WEB_THREADS = 4
# A client reuses its keep-alive connection only this soon after the last answer
# (gunicorn's keep-alive timeout is 2 s).
KEEPALIVE_REUSE_S = 1.0

# Targets from issue 2.
TARGET_IMPORT_RATIO = 0.5
TARGET_NEXT_P95_MS = {1: 10.0, 16: 60.0}
TARGET_PAIRS_PER_S = {16: 200.0}

# The tables chain_import fills, in foreign-key order, with the scratch twin each is
# COPYed into for the baseline.
COPY_TABLES = (
    ("annotation_problem", "bench_copy_problem"),
    ("annotation_chain", "bench_copy_chain"),
    ("annotation_step", "bench_copy_step"),
)
# Django keeps model defaults in Python, not in the schema, so COPY has to supply every
# NOT NULL column. Keep these in step with annotation/models.py.
COPY_COLUMNS = {
    "bench_copy_problem": (
        "id",
        "project_id",
        "text",
        "reference_answer",
        "content_hash",
        "created_at",
    ),
    "bench_copy_chain": (
        "id",
        "project_id",
        "problem_id",
        "content_hash",
        "final_answer",
        "generator",
        "meta",
        "step_count",
        "priority",
        "finished_count",
        "is_finished",
        "is_flagged",
        "created_at",
    ),
    "bench_copy_step": ("chain_id", "index", "text"),
}


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class BenchConfig:
    chains: int
    steps: int
    clients: tuple[int, ...]
    seconds: float
    warmup_seconds: float
    overlap: int
    workers: int
    threads: int
    database_url: str
    keep_db: bool
    out: Path
    strict: bool


def config_from_argv(argv: Sequence[str] | None = None) -> BenchConfig:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chains", type=int, help="chains to import (100000; --quick 2000)")
    parser.add_argument("--steps", type=int, default=10, help="steps per chain")
    parser.add_argument("--clients", help="comma-separated concurrent client counts (1,16)")
    parser.add_argument("--seconds", type=float, help="measured seconds per client count (20)")
    parser.add_argument("--warmup", type=float, help="unmeasured seconds before each count (2)")
    parser.add_argument("--overlap", type=int, default=2, help="annotators per chain")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers")
    parser.add_argument(
        "--threads",
        type=int,
        default=WEB_THREADS,
        help=f"request threads per worker, gthread as `make web` ({WEB_THREADS}); 1: sync workers",
    )
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--keep-db", action="store_true", help="reuse the database as it is")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON report path")
    parser.add_argument("--quick", action="store_true", help="small sizes for CI (< 1 min)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)

    quick = args.quick
    clients = tuple(int(c) for c in (args.clients or "1,16").split(",") if c.strip())
    if not clients or min(clients) < 1:
        parser.error("--clients needs positive integers")
    if (args.chains is not None and args.chains < 1) or args.steps < 1 or args.overlap < 1:
        parser.error("--chains, --steps and --overlap must be positive")
    return BenchConfig(
        chains=args.chains if args.chains is not None else (2_000 if quick else 100_000),
        steps=args.steps,
        clients=clients,
        seconds=args.seconds if args.seconds is not None else (3.0 if quick else 20.0),
        warmup_seconds=args.warmup if args.warmup is not None else (0.5 if quick else 2.0),
        overlap=args.overlap,
        workers=args.workers,
        threads=max(1, args.threads),
        database_url=args.database_url,
        keep_db=args.keep_db,
        out=args.out,
        strict=args.strict,
    )


# --------------------------------------------------------------------------- database


def _with_dbname(url: str, dbname: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{dbname}"))


def bench_database_prepare(*, url: str, recreate: bool) -> None:
    """Creates (or recreates) the bench database and migrates it.

    The name guard exists because recreating means DROP DATABASE: only a database that
    is plainly a benchmark's may be dropped."""
    dbname = urlsplit(url).path.lstrip("/")
    if not dbname:
        raise SystemExit(f"--database-url has no database name: {url}")
    if recreate and "bench" not in dbname:
        raise SystemExit(
            f"refusing to drop database {dbname!r}: its name does not contain 'bench' "
            "(use --keep-db to benchmark in it without dropping)"
        )
    with psycopg.connect(_with_dbname(url, "postgres"), autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone()
        if exists and recreate:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(dbname)))
            exists = None
        if not exists:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=REPO_ROOT,
        env=_django_env(url, "config.settings.dev"),
        check=True,
    )


def _django_env(database_url: str, settings_module: str) -> dict[str, str]:
    env = dict(os.environ)
    # pytest-django exports its own settings module; the bench must not inherit it.
    env["DJANGO_SETTINGS_MODULE"] = settings_module
    env["DATABASE_URL"] = database_url
    # DEBUG would record every query in memory and slow the import: measure without it.
    env["DJANGO_DEBUG"] = "0"
    env.setdefault("LOG_LEVEL", "WARNING")
    return env


def django_setup(database_url: str) -> None:
    """Sets Django up in this process with the dev settings on the bench database.

    Settings read the environment at import, so this runs only after the database exists."""
    os.environ.update(_django_env(database_url, "config.settings.dev"))
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    import django

    django.setup()


@dataclass(frozen=True)
class BenchFixture:
    project_id: int
    lead_id: int
    tokens: tuple[str, ...]


def bench_fixture_create(*, annotators: int, overlap: int) -> BenchFixture:
    """A fresh project, a lead and one annotator per client, each with an API token.

    Tokens are written directly: the token endpoint is throttled for logins (10/min), and
    sixteen logins would measure the throttle, not the queue."""
    from django.contrib.auth import get_user_model

    from annotation.api.tokens import api_token_create
    from annotation.models import Membership, Project, Role

    tag = f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"
    user_model = get_user_model()
    project = Project.objects.create(name=f"bench-foundation-{tag}", overlap=overlap)
    lead = user_model.objects.create_user(username=f"bench-lead-{tag}")
    Membership.objects.create(project=project, user=lead, role=Role.LEAD)
    tokens = []
    for i in range(annotators):
        user = user_model.objects.create_user(username=f"bench-annotator-{tag}-{i}")
        Membership.objects.create(project=project, user=user, role=Role.ANNOTATOR)
        tokens.append(api_token_create(user=user, name="bench").key)
    return BenchFixture(project_id=project.pk, lead_id=lead.pk, tokens=tuple(tokens))


# --------------------------------------------------------------------------- data

_NAMES = ("Ava", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jonas")
_ITEMS = ("apples", "marbles", "books", "tickets", "pencils", "coins", "stamps", "cookies")
_STEP_TEMPLATES = (
    "{n} starts with {a} {item} and buys {b} more, so {n} now has {a} + {b} = {s} {item} in total.",
    "Each of the {b} boxes holds {a} {item}, so multiplying gives {a} * {b} = {p} {item} "
    "across all boxes.",
    "After giving {b} {item} to a friend, {n} keeps {s} - {b} = {a} {item}, which we carry "
    "into the next step.",
    "Splitting {p} {item} evenly into {b} bags puts {p} / {b} = {a} {item} in every bag, "
    "with nothing left over.",
    "Checking the unit: {s} counts {item}, not boxes, so the running total for {n} stays at "
    "{s} before the next change.",
)
_FILLER = " This matches the quantities stated in the problem."
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def chain_content(*, index: int, steps: int) -> tuple[str, list[str], str]:
    """The problem, steps and answer of chain ``index``: word-problem arithmetic with step
    texts of 80-150 characters. Seeded by the index, so both files get the same text and
    every problem is distinct."""
    rng = random.Random(index)
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    per_crate, crates = rng.randint(2, 99), rng.randint(2, 40)
    sold = rng.randint(1, crates - 1)
    problem = (
        f"Order {index}: {name} packs {per_crate} {item} into each of {crates} crates, then "
        f"sells {sold} crates. How many {item} are left unsold?"
    )
    texts = []
    for k in range(steps):
        a, b = rng.randint(2, 99), rng.randint(2, 40)
        text = rng.choice(_STEP_TEMPLATES).format(n=name, item=item, a=a, b=b, s=a + b, p=a * b)
        if len(text) < 80:
            text += _FILLER
        texts.append(f"Step {k + 1}. {text}"[:150])
    return problem, texts, str(per_crate * (crates - sold))


@dataclass(frozen=True)
class BenchFiles:
    jsonl: Path
    copy: dict[str, Path]  # scratch table -> COPY text file
    bytes_jsonl: int


def bench_files_write(*, directory: Path, chains: int, steps: int, project_id: int) -> BenchFiles:
    """Streams the generic JSONL for the import and, in the same pass, the same rows in
    COPY text format for the baseline, so neither ever sits in memory whole."""
    jsonl = directory / "chains.jsonl"
    copy_paths = {scratch: directory / f"{scratch}.copy" for _, scratch in COPY_TABLES}
    created = "2025-01-01 00:00:00+00"
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(jsonl.open("w", encoding="utf-8"))
        files = {
            scratch: stack.enter_context(path.open("w", encoding="utf-8"))
            for scratch, path in copy_paths.items()
        }
        problems, chain_rows, step_rows = (
            files["bench_copy_problem"],
            files["bench_copy_chain"],
            files["bench_copy_step"],
        )
        for i in range(1, chains + 1):
            problem, texts, answer = chain_content(index=i, steps=steps)
            out.write(json.dumps({"problem": problem, "steps": texts, "answer": answer}))
            out.write("\n")
            problem_hash = hashlib.sha256(problem.encode()).hexdigest()
            chain_hash = hashlib.sha256("\x1f".join([problem, *texts]).encode()).hexdigest()
            problems.write(
                f"{i}\t{project_id}\t{problem.translate(_COPY_ESCAPES)}\t\t"
                f"{problem_hash}\t{created}\n"
            )
            chain_rows.write(
                f"{i}\t{project_id}\t{i}\t{chain_hash}\t{answer}\tbench\t{{}}\t"
                f"{steps}\t0\t0\tf\tf\t{created}\n"
            )
            step_rows.writelines(
                f"{i}\t{k}\t{text.translate(_COPY_ESCAPES)}\n" for k, text in enumerate(texts)
            )
    return BenchFiles(jsonl=jsonl, copy=copy_paths, bytes_jsonl=jsonl.stat().st_size)


# --------------------------------------------------------------------------- import vs COPY


def _checkpoint(conn: psycopg.Connection[Any]) -> None:
    # Start each timed write from a clean checkpoint, so neither side pays for the
    # other's dirty pages. Needs superuser; without it the comparison is merely noisier.
    with contextlib.suppress(psycopg.Error):
        conn.execute("CHECKPOINT")


def copy_baseline_measure(*, database_url: str, files: BenchFiles, steps_total: int) -> dict:
    """PostgreSQL's own COPY rate for the rows chain_import writes.

    Fair means the same work on the server: logged tables (not TEMP or UNLOGGED, which
    skip the WAL), the real tables' indexes, unique and check constraints (LIKE ...
    INCLUDING ALL) and their foreign keys re-pointed at the scratch twins, one transaction
    timed through its commit, as the import's is. Rows are pre-formatted, so the client
    only streams bytes: this is the server's ceiling, not a Python COPY loop."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        _scratch_drop(conn)
        for real, scratch in COPY_TABLES:
            conn.execute(
                sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(
                    sql.Identifier(scratch), sql.Identifier(real)
                )
            )
            for column, default in _model_defaults(real, COPY_COLUMNS[scratch]):
                conn.execute(
                    sql.SQL("ALTER TABLE {} ALTER COLUMN {} SET DEFAULT {}").format(
                        sql.Identifier(scratch), sql.Identifier(column), sql.Literal(default)
                    )
                )
        scratch_of = dict(COPY_TABLES)
        for real, scratch in COPY_TABLES:
            foreign_keys = conn.execute(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                " WHERE conrelid = %s::regclass AND contype = 'f' ORDER BY conname",
                (real,),
            ).fetchall()
            for n, (definition,) in enumerate(foreign_keys):
                definition = re.sub(
                    r"REFERENCES (\w+)\(",
                    lambda m: f"REFERENCES {scratch_of.get(m.group(1), m.group(1))}(",
                    definition,
                )
                conn.execute(
                    f'ALTER TABLE "{scratch}" ADD CONSTRAINT "{scratch}_fk{n}" {definition}'
                )
        _checkpoint(conn)
        try:
            busy_before = _machine_busy_seconds()
            started = time.perf_counter()
            with conn.transaction(), conn.cursor() as cur:
                for _, scratch in COPY_TABLES:
                    columns = sql.SQL(", ").join(map(sql.Identifier, COPY_COLUMNS[scratch]))
                    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
                        sql.Identifier(scratch), columns
                    )
                    with cur.copy(statement) as copy, files.copy[scratch].open("rb") as f:
                        while chunk := f.read(1 << 20):
                            copy.write(chunk)
            elapsed = time.perf_counter() - started
            busy = _busy_share(busy_before, elapsed)
        finally:
            _scratch_drop(conn)
            _checkpoint(conn)
    return {
        "seconds": elapsed,
        "steps": steps_total,
        "steps_per_s": steps_total / elapsed,
        "machine_busy": busy,
    }


def _model_defaults(table: str, columns: Sequence[str]) -> list[tuple[str, Any]]:
    """(column, value) for the NOT NULL columns of ``table`` that the COPY files leave out,
    from the model's field defaults: Django keeps defaults in Python, not in the schema,
    and the import (``import_copy.CopyTable``) fills them the same way, so a field added
    later (such as ``Chain.is_gold``) keeps the baseline comparable instead of breaking it."""
    from django.apps import apps
    from django.db import connection

    model = next(m for m in apps.get_models() if m._meta.db_table == table)
    defaults = []
    for model_field in model._meta.concrete_fields:
        if model_field.column in columns or model_field.null or not model_field.has_default():
            continue
        value = model_field.get_db_prep_save(model_field.get_default(), connection)
        defaults.append((model_field.column, value))
    return defaults


def _scratch_drop(conn: psycopg.Connection[Any]) -> None:
    conn.execute("DROP TABLE IF EXISTS " + ", ".join(s for _, s in reversed(COPY_TABLES)))


def import_measure(
    *, database_url: str, files: BenchFiles, fixture: BenchFixture, expected_steps: int
) -> dict:
    """Times chain_import on the JSONL in this process, the way the command runs it."""
    from django.contrib.auth import get_user_model

    from annotation.datasets.imports import chain_import
    from annotation.models import Project

    project = Project.objects.get(pk=fixture.project_id)
    lead = get_user_model().objects.get(pk=fixture.lead_id)
    with psycopg.connect(database_url, autocommit=True) as conn:
        _checkpoint(conn)
    rss_before = _max_rss_mb()
    busy_before = _machine_busy_seconds()
    started = time.perf_counter()
    result = chain_import(
        project=project,
        path=files.jsonl,
        filename=files.jsonl.name,
        fmt="generic",
        user=lead,
        progress=None,
    )
    elapsed = time.perf_counter() - started
    busy = _busy_share(busy_before, elapsed)
    steps_created = int(result.steps_created)
    if steps_created != expected_steps:
        raise RuntimeError(
            f"chain_import created {steps_created} steps, expected {expected_steps}: {result!r}"
        )
    return {
        "seconds": elapsed,
        "steps": steps_created,
        "chains": int(result.chains_created),
        "steps_per_s": steps_created / elapsed,
        "machine_busy": busy,
        "file_mb": files.bytes_jsonl / 2**20,
        # Peak RSS of the whole bench process; only a growth past what came before is
        # the import's, and a growth near the file size means it was read whole.
        "rss_peak_mb_before": rss_before,
        "rss_peak_mb_after": _max_rss_mb(),
    }


def _busy_share(busy_before: float | None, elapsed: float) -> float | None:
    """Share of the whole machine's CPU in use over a timed phase: near 1/cpus for the
    phase alone, higher when neighbours were busy too."""
    busy_after = _machine_busy_seconds()
    if busy_before is None or busy_after is None or elapsed <= 0:
        return None
    return (busy_after - busy_before) / (elapsed * (os.cpu_count() or 1))


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def database_settle(*, database_url: str) -> None:
    """VACUUM ANALYZE after the bulk load, so the queue runs on the plans and visibility
    map a database of this size has in steady state, not on a freshly-loaded one's; then a
    CHECKPOINT, so the load does not run under the checkpoint that the bulk load's WAL
    would start (spread over minutes, with a full-page image in the WAL for the first
    change of every page after it began: seen doubling PostgreSQL's CPU per pair)."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        _checkpoint(conn)


# --------------------------------------------------------------------------- gunicorn


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def gunicorn_running(
    *,
    database_url: str,
    workers: int,
    log_path: Path,
    broker_url: str | None = None,
    threads: int = WEB_THREADS,
) -> Iterator[tuple[int, int]]:
    """gunicorn on a free loopback port with the production profile (DEBUG off), killed
    with its workers on the way out whatever happens. Yields (port, master pid).

    ``threads``: request threads per worker, as ``make web`` runs it (gthread workers);
    1 runs gunicorn's sync workers, one request at a time each.

    ``broker_url``: the Celery broker the server enqueues to; None keeps the environment's
    CELERY_BROKER_URL, else BENCH_CELERY_BROKER_URL, else Redis database 10; "" the
    folder broker (config/broker.py), which no worker reads here."""
    port = _free_port()
    env = _django_env(database_url, "config.settings.prod")
    # A broker, as in production: a submit that finishes a chain enqueues the auto-training
    # check (when its project retrains automatically).
    if broker_url is None:
        env.setdefault(
            "CELERY_BROKER_URL",
            os.environ.get("BENCH_CELERY_BROKER_URL", "redis://127.0.0.1:6379/10"),
        )
    elif broker_url:
        env["CELERY_BROKER_URL"] = broker_url
    else:
        env.pop("CELERY_BROKER_URL", None)
    env.update(
        {
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            # Plain HTTP on loopback: the redirect to HTTPS would answer every request with 301.
            "DJANGO_SECURE_SSL_REDIRECT": "0",
        }
    )
    gunicorn = Path(sys.executable).with_name("gunicorn")
    command = [str(gunicorn)] if gunicorn.exists() else [sys.executable, "-m", "gunicorn"]
    command += [
        "config.wsgi:application",
        "-w",
        str(workers),
        "-b",
        f"127.0.0.1:{port}",
        "--log-level",
        "warning",
    ]
    if threads > 1:
        command += ["--worker-class", "gthread", "--threads", str(threads)]
    with log_path.open("wb") as log:
        # Its own session, so the whole group (master and workers) can be signalled.
        proc = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_ready(proc=proc, port=port, log_path=log_path)
        yield port, proc.pid
    finally:
        _process_group_stop(proc)
        _broker_queue_purge(env.get("CELERY_BROKER_URL", ""))


def _broker_queue_purge(url: str) -> None:
    """Drop the auto-training checks the run enqueued on the ``default`` queue: no worker
    runs them here, they name projects of the bench database, and left behind they would
    reach whatever worker next listens on that Redis database (a test's, say)."""
    if not url.startswith("redis://"):
        return
    import redis

    with contextlib.suppress(redis.RedisError):
        redis.Redis.from_url(url).delete("default")


def _wait_ready(*, proc: subprocess.Popen[bytes], port: int, log_path: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {proc.returncode}:\n{_tail(log_path)}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/api/v1/projects/")
            conn.getresponse().read()  # any answer means a worker has loaded Django
            conn.close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"gunicorn not answering on port {port} after 60 s:\n{_tail(log_path)}")


def _process_group_stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# --------------------------------------------------------------------------- load


@dataclass
class ClientStats:
    next_ms: list[float] = field(default_factory=list)
    submit_ms: list[float] = field(default_factory=list)
    pairs: int = 0
    submits_ok: int = 0
    empty: int = 0  # 204: nothing left for this annotator
    statuses: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)

    def failure(self, what: str) -> None:
        self.statuses[what.split(":", 1)[0]] += 1
        if len(self.failures) < 5:
            self.failures.append(what[:500])


class QueueClient:
    """One annotator on one connection. http.client keeps the socket open between
    requests and reopens it by itself after a ``Connection: close`` (gunicorn's sync
    workers send one on every answer)."""

    def __init__(self, *, port: int, token: str, project_id: int, think_ms: float = 0.0) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        # Grading time between next and submit: exponential with this mean, 0 for none
        # (a stress loop). Seeded by the token, so a rerun draws the same times.
        self.think_s = think_ms / 1000
        self.rng = random.Random(token)
        self.last_answer = time.perf_counter()
        self.headers = {
            "Authorization": f"Token {token}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        self.next_path = f"/api/v1/projects/{project_id}/assignments/next/"

    def post(self, path: str, body: dict | None) -> tuple[int, bytes, float]:
        data = json.dumps(body).encode() if body is not None else b""
        if time.perf_counter() - self.last_answer > KEEPALIVE_REUSE_S:
            # gunicorn closes a keep-alive connection idle for 2 s; a request sent on it as
            # it closes is lost in a broken pipe. Open a new one, as a browser would.
            self.conn.close()
        started = time.perf_counter()
        try:
            self.conn.request("POST", path, body=data, headers=self.headers)
            response = self.conn.getresponse()
            payload = response.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()  # start the next request on a fresh socket
            raise
        self.last_answer = time.perf_counter()
        return response.status, payload, (self.last_answer - started) * 1000

    def pair(self, stats: ClientStats) -> bool:
        """One next -> submit. False when the queue has nothing left for this annotator."""
        try:
            status, payload, next_ms = self.post(self.next_path, None)
        except (OSError, http.client.HTTPException) as exc:
            stats.failure(f"next error: {exc!r}")
            return True
        if status == 204:
            stats.next_ms.append(next_ms)
            stats.empty += 1
            return False
        if status != 200:
            stats.failure(f"next {status}: {payload[:300]!r}")
            return True
        stats.next_ms.append(next_ms)
        lease = json.loads(payload)
        if self.think_s:
            time.sleep(self.rng.expovariate(1 / self.think_s))
        ratings = [{"step": step["id"], "rating": 1} for step in lease["chain"]["steps"]]
        body = {"ratings": ratings, "request_id": uuid.uuid4().hex}
        try:
            status, payload, submit_ms = self.post(
                f"/api/v1/assignments/{lease['assignment']['id']}/submit/", body
            )
        except (OSError, http.client.HTTPException) as exc:
            stats.failure(f"submit error: {exc!r}")
            return True
        if status // 100 != 2:
            stats.failure(f"submit {status}: {payload[:300]!r}")
            return True
        stats.submit_ms.append(submit_ms)
        stats.submits_ok += 1
        stats.pairs += 1
        return True

    def close(self) -> None:
        self.conn.close()


def load_run(
    *,
    port: int,
    tokens: Sequence[str],
    project_id: int,
    seconds: float,
    meter: CpuMeter | None = None,
    client_factory: Callable[..., QueueClient] | None = None,
    think_ms: float = 0.0,
) -> dict:
    """``len(tokens)`` clients in a closed loop for ``seconds``: each starts its next pair
    only after the last one finished, so latency and throughput come from the same run.
    A pair started before the deadline is finished, so no lease is left dangling.
    ``client_factory`` (keyword arguments of ``QueueClient``) lets a caller record more."""
    make = client_factory or QueueClient
    clients = [make(port=port, token=t, project_id=project_id, think_ms=think_ms) for t in tokens]
    stats = [ClientStats() for _ in clients]
    barrier = threading.Barrier(len(clients) + 1)
    deadline = [0.0]
    finished_at = [0.0] * len(clients)

    def loop(i: int) -> None:
        barrier.wait()
        try:
            while time.perf_counter() < deadline[0]:
                if not clients[i].pair(stats[i]):
                    break
        finally:
            finished_at[i] = time.perf_counter()
            clients[i].close()

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(len(clients))]
    cpu_before = meter.sample() if meter else None
    for thread in threads:
        thread.start()
    started = time.perf_counter()
    deadline[0] = started + seconds
    barrier.wait()
    for thread in threads:
        thread.join(timeout=seconds + 120)
    elapsed = max(max(finished_at), started + 1e-9) - started
    cpu = CpuMeter.spent(cpu_before, meter.sample(), elapsed=elapsed) if meter else None
    merged = ClientStats()
    for s in stats:
        merged.next_ms += s.next_ms
        merged.submit_ms += s.submit_ms
        merged.pairs += s.pairs
        merged.submits_ok += s.submits_ok
        merged.empty += s.empty
        merged.statuses += s.statuses
        merged.failures += s.failures[: max(0, 5 - len(merged.failures))]
    return {
        "clients": len(clients),
        "seconds": elapsed,
        "pairs": merged.pairs,
        "pairs_per_s": merged.pairs / elapsed,
        "next_ms": _percentiles(merged.next_ms),
        "submit_ms": _percentiles(merged.submit_ms),
        "requests": len(merged.next_ms) + len(merged.submit_ms) + sum(merged.statuses.values()),
        "submits_ok": merged.submits_ok,
        "empty_queue": merged.empty,
        "non_2xx": sum(merged.statuses.values()),
        "non_2xx_by_kind": dict(merged.statuses),
        "failures": merged.failures,
        "cpu_s": cpu,
        "cpu_ms_per_pair": {
            kind: cpu[kind] * 1000 / merged.pairs for kind in ("django", "postgres", "client")
        }
        if cpu and merged.pairs
        else None,
    }


def _percentiles(samples: list[float]) -> dict[str, float | None]:
    ordered = sorted(samples)

    def rank(q: float) -> float | None:  # nearest rank: an observed latency, never a blend
        return ordered[max(0, math.ceil(q * len(ordered)) - 1)] if ordered else None

    return {"n": len(ordered), "p50": rank(0.50), "p95": rank(0.95), "p99": rank(0.99)}


# --------------------------------------------------------------------------- CPU


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _proc_stat(pid: int | str) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (which may hold spaces), so
    index 1 is the parent pid, 11 and 12 are user and system ticks, 13 and 14 those of
    its reaped children."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _cpu_seconds(pids: Sequence[int]) -> dict[int, float]:
    seconds = {}
    for pid in pids:
        fields = _proc_stat(pid)
        if fields is not None:
            seconds[pid] = (int(fields[11]) + int(fields[12])) / _TICKS
    return seconds


def _children_of(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if entry.name.isdigit():
            fields = _proc_stat(entry.name)
            if fields is not None and int(fields[1]) == parent:
                found.append(int(entry.name))
    return found


def _machine_busy_seconds() -> float | None:
    try:
        ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (ticks + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / _TICKS


class CpuMeter:
    """CPU seconds spent by Django (the gunicorn workers), by the PostgreSQL backends
    serving them, by this load generator, and by everything else on the machine.

    Wall-clock latency on a shared machine moves with its neighbours; CPU per pair does
    not, and "everything else" says how much the neighbours took. Linux only; elsewhere
    the figures are None."""

    def __init__(self, *, gunicorn_pid: int, database_url: str) -> None:
        self.gunicorn_pid = gunicorn_pid
        self.database_url = database_url
        self.postmaster_pid: int | None = None

    def _backend_pids(self) -> list[int]:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            ).fetchall()
        return [pid for (pid,) in rows]

    def _exited_backends_seconds(self, backends: Sequence[int]) -> float:
        """CPU seconds of the PostgreSQL processes that have exited: the postmaster's
        reaped children (cutime + cstime). Django closes a connection older than
        CONN_MAX_AGE and opens another, so backends come and go during a run."""
        if self.postmaster_pid is None:
            for pid in backends:
                fields = _proc_stat(pid)
                if fields is not None:
                    self.postmaster_pid = int(fields[1])
                    break
        fields = _proc_stat(self.postmaster_pid) if self.postmaster_pid else None
        return (int(fields[13]) + int(fields[14])) / _TICKS if fields else 0.0

    def sample(self) -> dict[str, Any]:
        backends = self._backend_pids()
        return {
            "django": _cpu_seconds(_children_of(self.gunicorn_pid)),
            "postgres": _cpu_seconds(backends),
            "postgres_exited": self._exited_backends_seconds(backends),
            "client": time.process_time(),
            "machine": _machine_busy_seconds(),
        }

    @staticmethod
    def spent(before: dict[str, Any], after: dict[str, Any], *, elapsed: float) -> dict:
        """CPU seconds per part between two samples; a process that appeared meanwhile
        counts whole (gunicorn replacing a worker, a new database connection), and a
        backend that exited meanwhile counts through the postmaster (this meter's own
        short connections too, a few milliseconds each)."""
        parts = {
            kind: sum(v - before[kind].get(pid, 0.0) for pid, v in after[kind].items())
            for kind in ("django", "postgres")
        }
        # An exited backend's whole life is in the postmaster's count; what it had spent
        # before the first sample is not this window's.
        gone = set(before["postgres"]) - set(after["postgres"])
        parts["postgres"] += after["postgres_exited"] - before["postgres_exited"]
        parts["postgres"] -= sum(before["postgres"][pid] for pid in gone)
        parts["client"] = after["client"] - before["client"]
        if after["machine"] is None or before["machine"] is None:
            return {**parts, "others": None, "machine_busy": None}
        busy = after["machine"] - before["machine"]
        capacity = elapsed * (os.cpu_count() or 1)
        return {
            **parts,
            # Everything not ours, PostgreSQL's background writers and autovacuum included.
            "others": max(0.0, busy - sum(parts.values())),
            "machine_busy": busy / capacity if capacity else None,
            "capacity": capacity,
        }


def queue_integrity_check(*, project_id: int, overlap: int) -> dict:
    """Counted in the database after the load: every accepted submit stored once, and no
    chain annotated by more people than the overlap allows (invariant 2)."""
    from django.db.models import Count, Q

    from annotation.models import Annotation, Chain

    human = Q(annotations__source="human")
    over = (
        Chain.objects.filter(project_id=project_id)
        .annotate(people=Count("annotations__annotator", filter=human, distinct=True))
        .filter(people__gt=overlap)
        .count()
    )
    stored = Annotation.objects.filter(chain__project_id=project_id, source="human").count()
    return {"human_annotations": stored, "chains_over_overlap": over}


# --------------------------------------------------------------------------- report


@dataclass(frozen=True)
class Row:
    metric: str
    value: str
    target: str = ""
    ok: bool | None = None


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def report_rows(report: dict) -> list[Row]:
    rows: list[Row] = []
    imp, copy = report["import"], report["copy"]
    ratio = imp["steps_per_s"] / copy["steps_per_s"]
    rows += [
        Row("import (chain_import)", f"{imp['steps_per_s']:,.0f} steps/s"),
        Row("PostgreSQL COPY, same rows (mean of 2)", f"{copy['steps_per_s']:,.0f} steps/s"),
        Row(
            "import / COPY",
            f"{ratio:.2f}",
            f">= {TARGET_IMPORT_RATIO:.2f}",
            ratio >= TARGET_IMPORT_RATIO,
        ),
    ]
    shares = [imp.get("machine_busy")] + [r.get("machine_busy") for r in copy.get("runs", [])]
    if None not in shares:
        rows.append(
            Row(
                "machine CPU busy: import / COPY 1, 2",
                " / ".join(f"{share:.0%}" for share in shares),
            )
        )
    for phase in report["http"]:
        c = phase["clients"]
        nxt, sub = phase["next_ms"], phase["submit_ms"]
        label = f"@{c} client{'s' if c > 1 else ''}"
        target = TARGET_NEXT_P95_MS.get(c)
        rows.append(
            Row(
                f"next ms p50/p95/p99 {label}",
                f"{_ms(nxt['p50'])} / {_ms(nxt['p95'])} / {_ms(nxt['p99'])}",
                f"p95 < {target:g} ms" if target else "",
                None if target is None else nxt["p95"] is not None and nxt["p95"] < target,
            )
        )
        rows.append(
            Row(
                f"submit ms p50/p95/p99 {label}",
                f"{_ms(sub['p50'])} / {_ms(sub['p95'])} / {_ms(sub['p99'])}",
            )
        )
        pairs_target = TARGET_PAIRS_PER_S.get(c)
        per_pair, cpu = phase.get("cpu_ms_per_pair"), phase.get("cpu_s")
        if per_pair:
            rows.append(
                Row(
                    f"CPU ms/pair {label}: django/pg/client",
                    f"{per_pair['django']:.1f} / {per_pair['postgres']:.1f} / "
                    f"{per_pair['client']:.1f}",
                )
            )
        if cpu and cpu.get("machine_busy") is not None:
            rows.append(
                Row(
                    f"machine CPU busy {label} (others)",
                    f"{cpu['machine_busy']:.0%} ({cpu['others'] / cpu['capacity']:.0%})",
                )
            )
        rows.append(
            Row(
                f"next+submit pairs/s {label}",
                f"{phase['pairs_per_s']:,.1f}",
                f">= {pairs_target:g}" if pairs_target else "",
                None if pairs_target is None else phase["pairs_per_s"] >= pairs_target,
            )
        )
    # A failure during warm-up is a failure all the same.
    non_2xx = sum(p["non_2xx"] + p["warmup"]["non_2xx"] for p in report["http"])
    rows.append(Row("non-2xx answers / errors", str(non_2xx), "= 0", non_2xx == 0))
    integrity = report["integrity"]
    lost = report["submits_ok_total"] - integrity["human_annotations"]
    rows.append(Row("submits lost (201 but not stored)", str(lost), "= 0", lost == 0))
    rows.append(
        Row(
            "chains over overlap",
            str(integrity["chains_over_overlap"]),
            "= 0",
            integrity["chains_over_overlap"] == 0,
        )
    )
    return rows


def table_text(*, header: str, cells: Sequence[Sequence[str]]) -> str:
    """``header``, a blank line, then ``cells`` (a heading row first, then metric, value,
    target, ok) in aligned columns, the values right-aligned."""
    widths = [max(len(cell[i]) for cell in cells) for i in range(4)]
    lines = [header, ""]
    for n, cell in enumerate(cells):
        lines.append(
            "  ".join(
                text.rjust(widths[i]) if i == 1 else text.ljust(widths[i])
                for i, text in enumerate(cell)
            ).rstrip()
        )
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _workers_text(cfg: dict) -> str:
    threads = cfg.get("threads", 1)
    if threads > 1:
        return f"{cfg['workers']} gthread workers x {threads} threads"
    return f"{cfg['workers']} sync workers"


def table_render(*, report: dict, rows: Sequence[Row]) -> str:
    cfg = report["config"]
    header = (
        f"{TITLE}: {cfg['chains']:,} chains x {cfg['steps']} steps "
        f"({cfg['chains'] * cfg['steps']:,} steps), overlap {cfg['overlap']}, "
        f"gunicorn {_workers_text(cfg)}, {cfg['seconds']:g} s per client count, "
        f"{report['machine']['cpus']} CPUs, {report['machine']['postgres']}"
    )
    cells = [("metric", "value", "target", "ok")] + [
        (r.metric, r.value, r.target, "" if r.ok is None else ("✓" if r.ok else "✗")) for r in rows
    ]
    return table_text(header=header, cells=cells)


# --------------------------------------------------------------------------- main


def _say(message: str) -> None:
    # Progress goes to stderr so stdout holds only the table.
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    cfg = config_from_argv(argv)
    steps_total = cfg.chains * cfg.steps
    _say(f"preparing database {urlsplit(cfg.database_url).path.lstrip('/')}")
    bench_database_prepare(url=cfg.database_url, recreate=not cfg.keep_db)
    django_setup(cfg.database_url)
    fixture = bench_fixture_create(annotators=max(cfg.clients), overlap=cfg.overlap)

    with tempfile.TemporaryDirectory(prefix="steplab-bench-") as tmp:
        tmpdir = Path(tmp)
        _say(f"writing {cfg.chains:,} chains x {cfg.steps} steps to {tmpdir}")
        files = bench_files_write(
            directory=tmpdir, chains=cfg.chains, steps=cfg.steps, project_id=fixture.project_id
        )
        # COPY runs before and after the import and the ratio uses their mean: on a
        # shared machine the load drifts, and one baseline taken at a quiet (or busy)
        # moment would skew the ratio either way.
        _say("COPY baseline (1/2)")
        copy_runs = [
            copy_baseline_measure(
                database_url=cfg.database_url, files=files, steps_total=steps_total
            )
        ]
        _say(f"COPY: {copy_runs[0]['steps_per_s']:,.0f} steps/s; importing with chain_import")
        imported = import_measure(
            database_url=cfg.database_url, files=files, fixture=fixture, expected_steps=steps_total
        )
        _say(f"import: {imported['steps_per_s']:,.0f} steps/s; COPY baseline (2/2)")
        copy_runs.append(
            copy_baseline_measure(
                database_url=cfg.database_url, files=files, steps_total=steps_total
            )
        )
        copy = {
            "steps_per_s": sum(r["steps_per_s"] for r in copy_runs) / len(copy_runs),
            "runs": copy_runs,
        }
        _say(f"COPY: {copy_runs[1]['steps_per_s']:,.0f} steps/s; VACUUM ANALYZE")
        database_settle(database_url=cfg.database_url)

        from django.db import connections

        connections.close_all()  # nothing of ours holds a connection during the load
        phases = []
        with gunicorn_running(
            database_url=cfg.database_url,
            workers=cfg.workers,
            threads=cfg.threads,
            log_path=tmpdir / "gunicorn.log",
        ) as (port, gunicorn_pid):
            meter = CpuMeter(gunicorn_pid=gunicorn_pid, database_url=cfg.database_url)
            for count in cfg.clients:
                tokens = fixture.tokens[:count]
                _say(
                    f"{count} client(s): warm-up {cfg.warmup_seconds:g} s, "
                    f"measuring {cfg.seconds:g} s"
                )
                warmup = load_run(
                    port=port,
                    tokens=tokens,
                    project_id=fixture.project_id,
                    seconds=cfg.warmup_seconds,
                )
                phase = load_run(
                    port=port,
                    tokens=tokens,
                    project_id=fixture.project_id,
                    seconds=cfg.seconds,
                    meter=meter,
                )
                phase["load_average_1min"] = os.getloadavg()[0]
                phase["warmup"] = {
                    k: warmup[k]
                    for k in ("pairs", "submits_ok", "non_2xx", "non_2xx_by_kind", "failures")
                }
                phases.append(phase)
            server_log = _tail(tmpdir / "gunicorn.log", 20)

    integrity = queue_integrity_check(project_id=fixture.project_id, overlap=cfg.overlap)
    with psycopg.connect(cfg.database_url) as conn:
        postgres = conn.execute("SHOW server_version").fetchone()[0].split()[0]
    report = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(cfg).items()},
        "machine": {
            "cpus": os.cpu_count(),
            "postgres": f"PostgreSQL {postgres}",
            "python": sys.version.split()[0],
        },
        "import": imported,
        "copy": copy,
        "http": phases,
        # Warm-up submits count too: they are stored like any other.
        "submits_ok_total": sum(p["submits_ok"] + p["warmup"]["submits_ok"] for p in phases),
        "integrity": integrity,
        "server_log_tail": server_log,
    }
    rows = report_rows(report)
    table = table_render(report=report, rows=rows)
    report["checks"] = [vars(r) for r in rows]
    report["table"] = table
    print(table, flush=True)
    for phase in phases:
        for failure in phase["failures"] + phase["warmup"]["failures"]:
            _say(f"failure @{phase['clients']}: {failure}")

    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    cfg.out.write_text(json.dumps(report, indent=2, default=str) + "\n")
    _say(f"wrote {cfg.out}")

    correctness = [r for r in rows if r.target.startswith("= 0")]
    if any(r.ok is False for r in correctness):
        return 1
    if cfg.strict and any(r.ok is False for r in rows):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
