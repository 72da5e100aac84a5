#!/usr/bin/env python
"""What public ids (annotation/public_ids.py) add to the labeling queue's hot path, in
CPU per next+submit pair, measured in this process without a database or a server:

    .venv/bin/python bench/bench_public_ids.py [--steps 10,150] [--pairs 20000]

A pair shows the lease's, the chain's and the steps' public ids in next's answer (one
permutation for all the chain's steps), reads the lease's back in submit and names the
leased chain's steps by their public ids (one more), and shows the chain's in submit's
answer (the steps' as sent): 6 permutations, whatever the chain's length, and a few
additions per step. Chains' and steps' permutations are keyed by the annotator who reads
them (the lease holder, a fixed user id here); the lease's is one for everyone. The
reference, in the same process, is the same answer built with row ids (nothing to
compute), so the table gives both the added microseconds per pair and the whole
answer-building ratio. The full queue over HTTP is
bench/bench_foundation.py (BENCHMARKS.md, "Foundation")."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def _per_pair_us(build, pairs: int) -> float:
    build()  # warm
    began = time.perf_counter()
    for _ in range(pairs):
        build()
    return (time.perf_counter() - began) / pairs * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", default="10,150", help="steps per chain, comma-separated")
    parser.add_argument("--pairs", type=int, default=20_000, help="pairs timed per row")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "out" / "public_ids.json")
    args = parser.parse_args()
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.dev")
    sys.path.insert(0, str(REPO_ROOT))
    import django

    django.setup()
    from annotation.public_ids import ASSIGNMENT_IDS, CHAIN_IDS, STEP_IDS

    rows = []
    print(f"{'steps':>6} {'row ids, us/pair':>17} {'public ids, us/pair':>20} {'added us':>9}")
    for steps in (int(s) for s in args.steps.split(",")):
        lease, chain, step_rows = 123_456_789, 4_567_890, list(range(9_000_000, 9_000_000 + steps))
        viewer = 4_242  # the lease holder's user id: chains' and steps' ids are theirs

        def with_row_ids(lease=lease, chain=chain, step_rows=step_rows) -> object:
            shown = {"a": lease, "c": chain, "s": [{"id": s} for s in step_rows]}
            sent = [item["id"] for item in shown["s"]]
            return shown, sent, {"c": chain, "r": [{"step": s} for s in sent]}

        def with_public_ids(lease=lease, chain=chain, step_rows=step_rows, viewer=viewer) -> object:
            base = STEP_IDS.base(chain, viewer=viewer)
            shown = {
                "a": ASSIGNMENT_IDS.show(lease, viewer=None),
                "c": CHAIN_IDS.show(chain, viewer=viewer),
                "s": [{"id": base + i} for i, _ in enumerate(step_rows)],
            }
            ASSIGNMENT_IDS.read(shown["a"], viewer=None)
            named = STEP_IDS.base(chain, viewer=viewer)
            row_of = {named + i: row for i, row in enumerate(step_rows)}
            sent = [row_of[item["id"]] for item in shown["s"]]
            answer = {
                "c": CHAIN_IDS.show(chain, viewer=viewer),
                "r": [{"step": s["id"]} for s in shown["s"]],
            }
            return shown, sent, answer

        pairs = max(200, args.pairs * 10 // max(steps, 1))
        plain = _per_pair_us(with_row_ids, pairs)
        public = _per_pair_us(with_public_ids, pairs)
        print(f"{steps:>6} {plain:>17.1f} {public:>20.1f} {public - plain:>9.1f}")
        rows.append({"steps": steps, "row_ids_us": plain, "public_ids_us": public})
    report = {
        "rows": rows,
        "added_us_per_pair": max(r["public_ids_us"] - r["row_ids_us"] for r in rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
