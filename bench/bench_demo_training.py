#!/usr/bin/env python
"""Training on `make demo` as ML staff meet it: how fast starting a run answers, what the
web processes and the training worker hold in memory, and how soon a cancel stops a run.

    .venv/bin/python bench/bench_demo_training.py [--chains 120] [--database-url URL]

Starts `make demo` (gunicorn and its Celery workers on a folder broker; SQLite in a
temporary folder unless --database-url names a database), has the demo annotator grade
``--chains`` chains of the demo project through the API (overlap set to 1; a seeded
error per chain, or none), then as ML staff:

1. starts a training run with the project's default settings (the bundled model), timing
   the answer, and follows it to its end, reading the memory of every process of the
   demo each quarter second: the web processes (gunicorn's master and workers) and the
   training worker with its task's child (each child's VmHWM, its peak resident memory);
2. starts a second run, waits for it to train, cancels it and times the stop.

Prints one table and writes bench/out/demo_training.json. The figures README quotes
("Requirements") come from a run of this script (BENCHMARKS.md has the machine)."""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
READY_SECONDS = 180
SAMPLE_SECONDS = 0.25

SETUP = """
from django.contrib.auth import get_user_model
from annotation.models import Project
from annotation.api.tokens import api_token_create
project = Project.objects.get(name="Demo: arithmetic word problems")
project.overlap = 1
project.save(update_fields=["overlap"])
users = get_user_model().objects
keys = [
    api_token_create(user=users.get(username=n), name="bench").key for n in ("annotator", "ml")
]
print("SETUP", project.pk, *keys)
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Api:
    """One user's JSON calls to the demo."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any, float]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        data = json.dumps(body).encode() if body is not None else None
        began = time.perf_counter()
        connection.request(method, path, body=data, headers=self.headers)
        response = connection.getresponse()
        payload = response.read()
        took = time.perf_counter() - began
        connection.close()
        return response.status, json.loads(payload) if payload else None, took


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid`` (from /proc's children lists)."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            with contextlib.suppress(OSError):
                children = [int(c) for c in (task / "children").read_text().split()]
                found.extend(children)
                todo.extend(children)
    return found


def _status_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB; (0, 0) once it is gone."""
    rss = hwm = 0
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


def _role(pid: int) -> str:
    """'web' (gunicorn), 'gpu' (the training worker or its task's child), 'default'."""
    with contextlib.suppress(OSError):
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        if "gunicorn" in command:
            return "web"
        if "gpu@" in command or "--queues gpu" in command:
            return "gpu"
        if "celery" in command:
            return "default"
    return "other"


class Meter:
    """Samples the demo's processes: the web processes' summed resident memory, and the
    highest VmHWM of any process of the training worker."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.web_kib: list[int] = []
        self.gpu_peak_kib = 0
        self.roles: dict[int, str] = {}

    def sample(self) -> None:
        web = 0
        for pid in _descendants(self.root):
            role = self.roles.setdefault(pid, _role(pid))
            if role == "gpu":
                # A task's child inherits the worker's command line: both read as gpu.
                self.gpu_peak_kib = max(self.gpu_peak_kib, _status_kib(pid)[1])
            elif role == "web":
                web += _status_kib(pid)[0]
        self.web_kib.append(web)


@contextlib.contextmanager
def demo_running(env: dict[str, str], log: Path) -> Iterator[tuple[int, int]]:
    """`make demo` on a free port, its output in ``log``: yields (port, the process group's
    leader) once /healthz answers; SIGTERM to the group on the way out (SIGKILL after a
    minute). RuntimeError with the log's tail when it does not start. Also the demo's
    tests' (tests/test_demo_serve.py)."""
    port = _free_port()
    with log.open("wb") as out:
        # `-o install`: the caller already runs inside the installed environment.
        popen = subprocess.Popen(
            ["make", "--no-print-directory", "-o", "install", "demo", f"PORT={port}"],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + READY_SECONDS
        while True:
            with contextlib.suppress(OSError):
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                connection.request("GET", "/healthz")
                if connection.getresponse().status == 200:
                    break
            if time.monotonic() > deadline or popen.poll() is not None:
                raise RuntimeError(f"make demo did not answer /healthz:\n{log.read_text()[-4000:]}")
            time.sleep(0.3)
        yield port, popen.pid
    finally:
        if popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(popen.pid, signal.SIGTERM)
            try:
                popen.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGKILL)
                popen.wait(timeout=30)


def _label(api: Api, project_id: int, chains: int, rng: random.Random) -> int:
    """The annotator grades up to ``chains`` chains: in about a third of them an error at
    a random step (-1 from there on, the demo project grades every step), else all +1."""
    done = 0
    while done < chains:
        status, lease, _ = api.call("POST", f"/api/v1/projects/{project_id}/assignments/next/")
        if status == 204:
            break
        assert status == 200, (status, lease)
        steps = lease["chain"]["steps"]
        error = rng.randrange(len(steps)) if rng.random() < 0.35 else len(steps)
        ratings = [{"step": s["id"], "rating": 1} for s in steps[:error]]
        if error < len(steps):
            ratings.append({"step": steps[error]["id"], "rating": -1})
            ratings += [{"step": s["id"], "rating": -1} for s in steps[error + 1 :]]
        body = {"ratings": ratings, "request_id": uuid.uuid4().hex}
        status, answer, _ = api.call(
            "POST", f"/api/v1/assignments/{lease['assignment']['id']}/submit/", body
        )
        assert status // 100 == 2, (status, answer)
        done += 1
    return done


def _follow(api: Api, run_id: int, meter: Meter, *, until: set[str], timeout: float) -> dict:
    """Reads the run (and samples memory) until its status or phase is in ``until``."""
    deadline = time.monotonic() + timeout
    while True:
        meter.sample()
        _, run, _ = api.call("GET", f"/api/v1/training-runs/{run_id}/")
        phase = (run.get("phase") or {}).get("name")
        if run["status"] in until or phase in until:
            return run
        if time.monotonic() > deadline:
            raise SystemExit(f"run {run_id} still {run['status']} / {phase} after {timeout} s")
        time.sleep(SAMPLE_SECONDS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=120, help="chains labeled before training")
    parser.add_argument("--database-url", default="", help="default: SQLite in a temporary folder")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds a run may take")
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "bench" / "out" / "demo_training.json"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="steplab-bench-demo-") as tmp:
        keep = ("DJANGO_", "MAKE", "CELERY_", "CACHE_URL", "STEPLAB_", "DATABASE_URL")
        env = {k: v for k, v in os.environ.items() if not k.startswith(keep)}
        env.update(
            PYTHONUNBUFFERED="1",
            DATABASE_URL=args.database_url or f"sqlite:///{tmp}/demo.sqlite3",
            STEPLAB_BROKER_DIR=f"{tmp}/broker",
            STEPLAB_MODEL_DIR=f"{tmp}/models",
        )
        with demo_running(env, Path(tmp) / "demo.log") as (port, root):
            made = subprocess.run(
                [sys.executable, "manage.py", "shell", "-c", SETUP],
                cwd=REPO_ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            line = next(x for x in made.stdout.splitlines() if x.startswith("SETUP "))
            _, project_id, annotator_key, ml_key = line.split()
            labeled = _label(
                Api(port, annotator_key), int(project_id), args.chains, random.Random(7)
            )
            ml, meter = Api(port, ml_key), Meter(root)
            meter.sample()
            web_before_kib = meter.web_kib[-1]

            started = time.perf_counter()
            status, run, answer_s = ml.call(
                "POST", f"/api/v1/projects/{project_id}/training-runs/", {}
            )
            assert status == 201, (status, run)
            run = _follow(
                ml,
                run["id"],
                meter,
                until={"succeeded", "failed", "cancelled"},
                timeout=args.timeout,
            )
            trained_s = time.perf_counter() - started
            phases = [p["name"] for p in (run.get("phase") or {}).get("past", [])]

            status, second, second_answer_s = ml.call(
                "POST", f"/api/v1/projects/{project_id}/training-runs/", {}
            )
            assert status == 201, (status, second)
            _follow(
                ml,
                second["id"],
                meter,
                until={"training", "failed", "succeeded"},
                timeout=args.timeout,
            )
            asked = time.perf_counter()
            ml.call("POST", f"/api/v1/training-runs/{second['id']}/cancel/")
            stopped = _follow(
                ml, second["id"], meter, until={"cancelled", "succeeded", "failed"}, timeout=300
            )
            cancel_s = time.perf_counter() - asked

    report = {
        "chains_labeled": labeled,
        "database": "postgresql" if args.database_url else "sqlite",
        "run_status": run["status"],
        "run_error": run.get("error", ""),
        "phases": phases,
        "start_answer_s": answer_s,
        "second_start_answer_s": second_answer_s,
        "train_wall_s": trained_s,
        "web_rss_before_mib": web_before_kib / 1024,
        "web_rss_max_mib": max(meter.web_kib) / 1024,
        "web_rss_after_mib": meter.web_kib[-1] / 1024,
        "training_worker_peak_mib": meter.gpu_peak_kib / 1024,
        "cancelled_status": stopped["status"],
        "cancel_to_stopped_s": cancel_s,
    }
    print(f"{'figure':<34} {'value':>12}")
    for key, value in report.items():
        shown = f"{value:.2f}" if isinstance(value, float) else str(value)
        print(f"{key:<34} {shown:>12}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    if run["status"] != "succeeded" or stopped["status"] != "cancelled":
        raise SystemExit(1)


if __name__ == "__main__":
    main()
