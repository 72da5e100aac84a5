#!/usr/bin/env python
"""Frozen-head round benchmark: how long one active-learning round takes on the CPU once
the step-representation cache is built.

    .venv/bin/python bench/bench_ml_round.py [--labeled 2000] [--unlabeled 20000]
        [--heldout 200] [--out bench/out/ml_round.json]

1. First pass (reported, not part of the round): synthesizes short chains and runs the
   bundled MiniLM once over all of them, filling the in-memory feature cache.
2. The round (the figure of issue 4, target < 60 s): ``train_prm`` in frozen_head mode on
   the labeled chains (class-balanced loss, the threshold chosen on their out-of-bag
   scores, held-out metrics), ``load_prm`` of the new checkpoint,
   ``score_chains`` over the unlabeled chains, and ``select_batch`` of the next batch.

Timings are wall-clock on whatever else the machine is doing: on a shared 2-core box,
other processes compete for the cores and the figures move with them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

TITLE = "Steplab PRM frozen-head round benchmark"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--labeled", type=int, default=2000)
    parser.add_argument("--unlabeled", type=int, default=20000)
    parser.add_argument("--heldout", type=int, default=200)
    parser.add_argument("--head-epochs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "out" / "ml_round.json")
    args = parser.parse_args()

    import numpy as np
    import torch

    from prm_training.ml.acquisition import select_batch
    from prm_training.ml.checkpoint import load_prm
    from prm_training.ml.config import PRMConfig
    from prm_training.ml.launch import train_prm
    from prm_training.ml.model import (
        backbone_fingerprint,
        load_configured_backbone,
        resolve_device,
    )
    from prm_training.ml.score import frozen_step_features, score_chains
    from prm_training.ml.synthetic import synthetic_chains

    config = PRMConfig(mode="frozen_head", head_epochs=args.head_epochs)
    total = args.labeled + args.heldout + args.unlabeled
    chains = synthetic_chains(total, seed=0, steps=(2, 4), words_per_step=(2, 4))
    labeled = chains[: args.labeled]
    heldout = chains[args.labeled : args.labeled + args.heldout]
    unlabeled = [
        type(c)(c.chain_id, c.problem, c.steps) for c in chains[args.labeled + args.heldout :]
    ]

    started = time.perf_counter()
    device = resolve_device(config.device)
    tokenizer, backbone, kind, _ = load_configured_backbone(config, device)
    # The same cache train_prm and score_chains read (filled here, outside the round).
    frozen_step_features(
        config,
        chains,
        fingerprint=backbone_fingerprint(config.backbone),
        backbone=backbone.to(device),
        kind=kind,
        tokenizer=tokenizer,
        device=device,
        batch_size=64,
    )
    first_pass = time.perf_counter() - started
    steps = sum(len(c.steps) for c in chains)

    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        t0 = time.perf_counter()
        result = train_prm(config, labeled, heldout, Path(scratch) / "v1")
        t1 = time.perf_counter()
        prm = load_prm(result.checkpoint_dir)
        t2 = time.perf_counter()
        scores = list(score_chains(prm, unlabeled))
        t3 = time.perf_counter()
        picked = select_batch("disagreement", scores, 100, rng=np.random.default_rng(0))
        t4 = time.perf_counter()
    timings = {"train_s": t1 - t0, "load_s": t2 - t1, "score_s": t3 - t2, "select_s": t4 - t3}
    round_s = t4 - t0
    report = {
        "chains": total,
        "steps": steps,
        "first_pass_s": first_pass,
        "round_s": round_s,
        **timings,
        "labeled": args.labeled,
        "unlabeled": args.unlabeled,
        "heldout": args.heldout,
        "metrics": result.metrics,
        "selected": len(picked),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
    }
    rows = [
        ("chains / steps cached", f"{total} / {steps}"),
        ("first pass (backbone, not in round) s", f"{first_pass:.1f}"),
        (f"train {args.labeled} labeled + eval {args.heldout} s", f"{timings['train_s']:.2f}"),
        ("load checkpoint s", f"{timings['load_s']:.2f}"),
        (f"rescore {args.unlabeled} unlabeled s", f"{timings['score_s']:.2f}"),
        ("select batch of 100 s", f"{timings['select_s']:.3f}"),
        ("ROUND s (target < 60)", f"{round_s:.2f}"),
        ("held-out step AUROC", f"{result.metrics.get('step_auroc', float('nan')):.3f}"),
        ("held-out ProcessBench F1", f"{result.metrics.get('processbench_f1', float('nan')):.3f}"),
        ("threshold (chosen on training chains)", f"{result.metrics['threshold']:.2f}"),
        ("load average 1/5/15 min", " ".join(f"{x:.1f}" for x in os.getloadavg())),
    ]
    width = max(len(name) for name, _ in rows)
    print(TITLE)
    for name, value in rows:
        print(f"  {name:<{width}}  {value:>14}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
