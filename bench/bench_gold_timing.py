#!/usr/bin/env python
"""Gold seen by annotators who compare notes, over HTTP against a production-profile
server: the ids they pool and the times they measure.

    .venv/bin/python bench/bench_gold_timing.py [--annotators 6] [--real 150] [--gold 40]
        [--gold-rate 0.3] [--overlap 2] [--database-url URL] [--out bench/out/gold.json]

Creates (or recreates) the bench database and a lab's project: --real chains and --gold
gold chains (answer keys from an import), the overlap, the gold rate, a webhook on
``chain.finished`` and auto-retraining on, so a real submit that finishes a chain sends
messages to the broker. gunicorn serves it (config.settings.prod, 2 workers); the
annotators, one API token each, take turns on one connection each: next, then submit
with every step rated, until the queue has nothing left for any of them.

Then it attacks what they saw, as annotators comparing notes would:

- pooled ids: every chain id the annotators read, and how many of them read each; an id
  read by more than the overlap names a gold chain (one id per chain for everyone did);
- timing: for each pair after each annotator's first, the client's milliseconds for next,
  for submit and their difference, ranked gold against real by a classifier (the ROC AUC
  with DeLong's 95% interval: an interval that holds 0.5 tells gold apart no better than
  chance).

Which chains were gold is read from the database afterwards, never from the answers.
Exit status 1 when a pooled id names a gold chain or an interval leaves out 0.5.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))

from bench_foundation import (  # noqa: E402  (a sibling script, found through BENCH_DIR)
    QueueClient,
    bench_database_prepare,
    django_setup,
    gunicorn_running,
)

TITLE = "Steplab gold benchmark: what annotators comparing notes tell apart"
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/steplab_bench_gold"
DEFAULT_OUT = REPO_ROOT / "bench" / "out" / "gold.json"


@dataclass(frozen=True)
class Lab:
    project_id: int
    tokens: dict[int, str]  # user id -> API token
    gold_ids: frozenset[int]


def lab_create(args: argparse.Namespace) -> Lab:
    """The project, its chains (three steps each), gold answer keys from an import, the
    webhook, auto-retraining and the annotators with their tokens."""
    from django.contrib.auth import get_user_model

    from annotation.api.tokens import api_token_create
    from annotation.models import (
        Annotation,
        AnnotationSource,
        Chain,
        ImportBatch,
        Membership,
        Problem,
        Project,
        Role,
        Step,
        StepRating,
        Webhook,
        WebhookEvent,
    )
    from annotation.quality.gold import gold_mark
    from prm_training.models import ProjectTrainingSettings

    tag = f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    project = Project.objects.create(
        name=f"bench-gold-{tag}", overlap=args.overlap, gold_rate=args.gold_rate
    )
    ProjectTrainingSettings.objects.update_or_create(
        project=project, defaults={"retrain_every_n_finished": 100_000}
    )
    Webhook.objects.create(
        project=project,
        url="https://hooks.example.org/steplab",
        events=[WebhookEvent.CHAIN_FINISHED],
        secret="whsec_" + "A" * 32,
    )
    batch = ImportBatch.objects.create(
        project=project, filename="keys.jsonl", format="prm800k", content_hash=f"keys-{tag}"
    )
    gold_ids = []
    for i in range(args.real + args.gold):
        # Texts of one length for every chain, gold or real: what a chain shows is the
        # same size either way, so only the server's own work can tell them apart.
        problem = Problem.objects.create(
            project=project, text=f"What is {i:05d} + {i:05d}?", content_hash=f"p-{tag}-{i}"
        )
        chain = Chain.objects.create(
            project=project,
            problem=problem,
            content_hash=f"c-{tag}-{i}",
            final_answer=f"{2 * i:06d}",
            step_count=3,
        )
        steps = Step.objects.bulk_create(
            Step(chain=chain, index=k, text=f"Step {k + 1} of chain {i:05d}.") for k in range(3)
        )
        if i >= args.real:
            key = Annotation.objects.create(
                chain=chain,
                source=AnnotationSource.IMPORT,
                source_name="prm800k",
                import_batch=batch,
            )
            StepRating.objects.bulk_create(
                StepRating(annotation=key, step=step, rating=1) for step in steps
            )
            gold_ids.append(chain.pk)
    gold_mark(project=project, chain_ids=gold_ids)
    tokens = {}
    for i in range(args.annotators):
        user = get_user_model().objects.create_user(username=f"bench-gold-{tag}-{i}")
        Membership.objects.create(project=project, user=user, role=Role.ANNOTATOR)
        tokens[user.pk] = api_token_create(user=user, name="bench").key
    return Lab(project_id=project.pk, tokens=tokens, gold_ids=frozenset(gold_ids))


@dataclass(frozen=True)
class Pair:
    annotator: int
    chain_public_id: int  # what the annotator read
    chain_row: int  # what the attacker wants to find out (read from the database)
    next_ms: float
    submit_ms: float
    gold: bool


def _newest_lease_chain(user_id: int) -> int:
    from annotation.models import Assignment

    return (
        Assignment.objects.filter(annotator_id=user_id)
        .order_by("-id")
        .values_list("chain_id", flat=True)[0]
    )


def work(port: int, lab: Lab) -> list[Pair]:
    """The annotators take turns, one pair each, until none has anything left."""
    clients = {
        user: QueueClient(port=port, token=token, project_id=lab.project_id)
        for user, token in lab.tokens.items()
    }
    pairs: list[Pair] = []
    active = set(clients)
    while active:
        for user in sorted(active):
            client = clients[user]
            status, payload, next_ms = client.post(client.next_path, None)
            if status == 204:
                active.discard(user)
                continue
            assert status == 200, (status, payload[:300])
            lease = json.loads(payload)
            ratings = [{"step": s["id"], "rating": 1} for s in lease["chain"]["steps"]]
            path = f"/api/v1/assignments/{lease['assignment']['id']}/submit/"
            status, payload, submit_ms = client.post(path, {"ratings": ratings})
            assert status == 201, (status, payload[:300])
            row = _newest_lease_chain(user)
            gold = row in lab.gold_ids
            pairs.append(Pair(user, lease["chain"]["id"], row, next_ms, submit_ms, gold))
    for client in clients.values():
        client.close()
    return pairs


def pooled_ids(pairs: Sequence[Pair], overlap: int) -> dict[str, int]:
    """What pooling the chain ids finds: ids read by two or more annotators, ids read by
    more than the overlap (named gold), and how many of those are gold; beside them, how
    many gold chains more annotators than the overlap did meet (what there was to find)."""
    readers: dict[int, set[int]] = {}
    gold_of: dict[int, bool] = {}
    for pair in pairs:
        readers.setdefault(pair.chain_public_id, set()).add(pair.annotator)
        gold_of[pair.chain_public_id] = pair.gold
    named = [i for i, who in readers.items() if len(who) > overlap]
    return {
        "ids_read": len(readers),
        "ids_read_by_two_or_more": sum(1 for who in readers.values() if len(who) >= 2),
        "ids_named_gold": len(named),
        "named_and_gold": sum(1 for i in named if gold_of[i]),
        "gold_chains_met_beyond_overlap": sum(
            1
            for row in {p.chain_row for p in pairs if p.gold}
            if len({p.annotator for p in pairs if p.chain_row == row}) > overlap
        ),
    }


def timing(pairs: Sequence[Pair]) -> list[dict[str, Any]]:
    """AUC of each score, gold against real, after each annotator's first pair."""
    from prm_training.ml.metrics import auc_interval

    seen: set[int] = set()
    kept = []
    for pair in pairs:
        if pair.annotator in seen:
            kept.append(pair)
        seen.add(pair.annotator)
    scores = {
        "next ms": lambda p: p.next_ms,
        "submit ms": lambda p: p.submit_ms,
        "next - submit ms": lambda p: p.next_ms - p.submit_ms,
    }
    rows = []
    for name, score in scores.items():
        gold = [score(p) for p in kept if p.gold]
        real = [score(p) for p in kept if not p.gold]
        auc, low, high = auc_interval(gold, real)
        rows.append(
            {
                "score": name,
                "gold_median": round(statistics.median(gold), 2),
                "real_median": round(statistics.median(real), 2),
                "gold": len(gold),
                "real": len(real),
                "auc": round(auc, 3),
                "low": round(low, 3),
                "high": round(high, 3),
                "ok": low <= 0.5 <= high,
            }
        )
    return rows


def run(args: argparse.Namespace) -> dict[str, Any]:
    bench_database_prepare(url=args.database_url, recreate=True)
    django_setup(args.database_url)
    lab = lab_create(args)
    with tempfile.TemporaryDirectory(prefix="steplab-bench-gold-") as workdir:
        with gunicorn_running(
            database_url=args.database_url, workers=2, log_path=Path(workdir) / "gunicorn.log"
        ) as (port, _master):
            pairs = work(port, lab)
    return {
        "title": TITLE,
        "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs)",
        "date": time.strftime("%Y-%m-%d"),
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "database_url")},
        "requests": 2 * len(pairs),
        "pooled_ids": pooled_ids(pairs, args.overlap),
        "timing": timing(pairs),
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--annotators", type=int, default=6)
    parser.add_argument("--real", type=int, default=150, help="real chains")
    parser.add_argument("--gold", type=int, default=40, help="gold chains")
    parser.add_argument("--gold-rate", type=float, default=0.3)
    parser.add_argument("--overlap", type=int, default=2)
    parser.add_argument("--database-url", default=DEFAULT_DATABASE_URL)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    pooled = report["pooled_ids"]
    print(TITLE)
    print(f"{report['requests']} requests by {args.annotators} annotators, overlap {args.overlap}")
    print(
        f"pooled chain ids: {pooled['ids_read']} read, {pooled['ids_read_by_two_or_more']} by two "
        f"or more, {pooled['ids_named_gold']} named gold (read by more than {args.overlap}), "
        f"{pooled['named_and_gold']} of them gold; {pooled['gold_chains_met_beyond_overlap']} "
        f"gold chains were met by more than {args.overlap}"
    )
    print(f"{'score':<18} {'gold med':>9} {'real med':>9} {'n gold':>7} {'n real':>7}  AUC [95%]")
    for row in report["timing"]:
        mark = "" if row["ok"] else "  <-- tells gold apart"
        print(
            f"{row['score']:<18} {row['gold_median']:>9.2f} {row['real_median']:>9.2f} "
            f"{row['gold']:>7} {row['real']:>7}  {row['auc']:.3f} "
            f"[{row['low']:.3f}, {row['high']:.3f}]{mark}"
        )
    print(f"{report['machine']}, {report['date']}; report: {args.out}")
    leaked = pooled["named_and_gold"] > 0 or not all(r["ok"] for r in report["timing"])
    return 1 if leaked else 0


if __name__ == "__main__":
    sys.exit(main())
