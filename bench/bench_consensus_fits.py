#!/usr/bin/env python
"""Dawid-Skene fits shared across processes: N processes ask for one project's fit at once.

    .venv/bin/python bench/bench_consensus_fits.py [--chains 2000] [--steps 10]
        [--annotators 3] [--processes 8] [--database-url URL] [--out PATH]

Builds a Dawid-Skene project in a fresh bench database (its name must contain "bench"):
``--chains`` chains of ``--steps`` steps, each rated by ``--annotators`` people. Then
twice, ``--processes`` interpreters ask for its fit at the same moment
(``dawid_skene_fit``): first with no stored fit (one of them fits, the others wait on the
project's lock and read what it stored), then again with the fit stored (none fits). Each
process counts the fits it ran from the fit log line; "at once" counts the calls that
began before the first one ended. Prints a table and writes a JSON
report whose "checks" are the fit counts: exit status 1 when a round ran any other
number of fits than expected (1, then 0).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/steplab_bench_consensus"
DEFAULT_OUT = REPO_ROOT / "bench" / "out" / "consensus_fits.json"
# The children set Django up (seconds on a loaded machine) before they ask.
START_DELAY_SECONDS = 25.0


def _env(database_url: str) -> dict[str, str]:
    return {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "config.settings.dev",
        "DJANGO_DEBUG": "0",
        "PYTHONPATH": str(REPO_ROOT),
    }


def _django(database_url: str) -> None:
    os.environ.update(_env(database_url))
    sys.path.insert(0, str(REPO_ROOT))
    import django

    django.setup()


def _recreate_database(database_url: str) -> None:
    from urllib.parse import urlsplit, urlunsplit

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
        conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=REPO_ROOT,
        env=_env(database_url),
        check=True,
    )


def _project(*, chains: int, steps: int, annotators: int) -> int:
    """A Dawid-Skene project whose chains every annotator rated; its id."""
    from django.contrib.auth import get_user_model

    from annotation.models import (
        Annotation,
        AnnotationSource,
        Chain,
        ConsensusMethod,
        Problem,
        Project,
        Step,
        StepRating,
    )

    project = Project.objects.create(name="bench consensus", consensus=ConsensusMethod.DAWID_SKENE)
    people = [
        get_user_model().objects.create_user(username=f"bench-annotator-{i}")
        for i in range(annotators)
    ]
    problems = Problem.objects.bulk_create(
        Problem(project=project, text=f"problem {n}", content_hash=f"p{n}") for n in range(chains)
    )
    made = Chain.objects.bulk_create(
        Chain(project=project, problem=problem, content_hash=f"c{n}")
        for n, problem in enumerate(problems)
    )
    step_rows = Step.objects.bulk_create(
        Step(chain=chain, index=i, text=f"step {i}") for chain in made for i in range(steps)
    )
    passes = Annotation.objects.bulk_create(
        Annotation(chain=chain, source=AnnotationSource.HUMAN, annotator=person)
        for chain in made
        for person in people
    )
    ratings = []
    for at, annotation in enumerate(passes):
        chain_at, who = divmod(at, annotators)
        for i in range(steps):
            step = step_rows[chain_at * steps + i]
            rating = 1 if (chain_at + i + who) % 4 else -1
            ratings.append(StepRating(annotation=annotation, step=step, rating=rating))
    StepRating.objects.bulk_create(ratings, batch_size=10000)
    return project.pk


class _FitLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.fits = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Dawid-Skene fit of project"):
            self.fits += 1


def _child(database_url: str, project_id: int, start_at: float) -> None:
    _django(database_url)
    from annotation.models import Project
    from annotation.quality.consensus_fit import dawid_skene_fit

    fit_log = _FitLog()
    consensus_logger = logging.getLogger("annotation.quality.consensus_fit")
    consensus_logger.addHandler(fit_log)
    consensus_logger.setLevel(logging.INFO)
    project = Project.objects.get(pk=project_id)
    time.sleep(max(0.0, start_at - time.time()))
    began = time.time()
    fit = dawid_skene_fit(project=project)
    ended = time.time()
    print(json.dumps({"began": began, "ended": ended, "votes": fit.votes, "fits": fit_log.fits}))


def _round(database_url: str, project_id: int, processes: int) -> dict[str, Any]:
    start_at = time.time() + START_DELAY_SECONDS
    command = [sys.executable, __file__, "--database-url", database_url, "--child"]
    children = [
        subprocess.Popen(
            [*command, str(project_id), str(start_at)],
            cwd=REPO_ROOT,
            env=_env(database_url),
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    answers = []
    for child in children:
        out, _ = child.communicate(timeout=1800)
        if child.returncode != 0:
            raise SystemExit(f"a child failed with exit status {child.returncode}")
        answers.append(json.loads(out.strip().splitlines()[-1]))
    return {
        "processes": processes,
        "fits": sum(answer["fits"] for answer in answers),
        # Calls that began before the first call ended: these asked at once.
        "at_once": sum(answer["began"] < min(a["ended"] for a in answers) for answer in answers),
        # Seconds each process spent in dawid_skene_fit: fitting, or waiting and reading.
        "longest_call_s": round(max(a["ended"] - a["began"] for a in answers), 3),
        "shortest_call_s": round(min(a["ended"] - a["began"] for a in answers), 3),
        "votes": answers[0]["votes"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--annotators", type=int, default=3)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--child", nargs=2, metavar=("PROJECT", "START_AT"))
    args = parser.parse_args()
    if args.child:
        _child(args.database_url, int(args.child[0]), float(args.child[1]))
        return
    _recreate_database(args.database_url)
    _django(args.database_url)
    project_id = _project(chains=args.chains, steps=args.steps, annotators=args.annotators)
    rounds = {
        "no stored fit": _round(args.database_url, project_id, args.processes),
        "fit stored": _round(args.database_url, project_id, args.processes),
    }
    expected = {"no stored fit": 1, "fit stored": 0}
    checks = [
        {
            "metric": f"fits run by {args.processes} processes at once, {name}",
            "value": str(figures["fits"]),
            "target": f"= {expected[name]}",
            "ok": figures["fits"] == expected[name],
        }
        for name, figures in rounds.items()
    ]
    print(
        f"{'round':<16} {'processes':>9} {'at once':>7} {'fits':>5} "
        f"{'shortest call s':>16} {'longest call s':>15}"
    )
    for name, figures in rounds.items():
        print(
            f"{name:<16} {figures['processes']:>9} {figures['at_once']:>7} "
            f"{figures['fits']:>5} {figures['shortest_call_s']:>16} "
            f"{figures['longest_call_s']:>15}"
        )
    report = {
        "chains": args.chains,
        "steps": args.steps,
        "annotators": args.annotators,
        "votes": rounds["no stored fit"]["votes"],
        "rounds": rounds,
        "checks": checks,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    if not all(check["ok"] for check in checks):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
