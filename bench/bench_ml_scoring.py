#!/usr/bin/env python
"""Scoring throughput: ``score_chains`` (tokenize, window, length-bucket, step-masked
forward, heads) against a bare forward pass of the same backbone over the same token
windows in the same process, in tokens per second (target: >= 0.9 of bare).

    .venv/bin/python bench/bench_ml_scoring.py [--chains 2000] [--batch 32] [--repeats 3]

The bare pass gets its batches pre-tokenized and pre-padded (it measures the backbone
alone, 2-D padding mask); scoring pays for everything. Each side runs ``--repeats`` times,
alternating, and the best run of each counts, which damps (but on a shared 2-core machine
does not remove) noise from other processes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

TITLE = "Steplab PRM scoring throughput benchmark"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=500)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "out" / "ml_scoring.json")
    args = parser.parse_args()

    import torch

    from prm_training.ml.config import PRMConfig
    from prm_training.ml.data import chains_to_windows
    from prm_training.ml.features import bucketed_batches, pad_token_id
    from prm_training.ml.inputs import CONTEXT_WIDTH
    from prm_training.ml.model import (
        EnsembleHead,
        backbone_fingerprint,
        collate_windows,
        load_backbone,
        step_feature_width,
    )
    from prm_training.ml.score import LoadedPRM, score_chains
    from prm_training.ml.synthetic import synthetic_chains

    # "full" mode scores through the backbone every time (no feature cache), which is
    # what this benchmark measures.
    config = PRMConfig(mode="full")
    tokenizer, backbone, kind = load_backbone(config.backbone)
    backbone.eval()
    device = torch.device("cpu")
    head = EnsembleHead(
        step_feature_width(int(backbone.config.hidden_size), config.step_pooling),
        config.head_hidden,
        config.ensemble_size,
        context=CONTEXT_WIDTH,
    ).eval()
    prm = LoadedPRM(
        config=config,
        tokenizer=tokenizer,
        backbone=backbone,
        head=head,
        kind=kind,
        device=device,
        fingerprint=backbone_fingerprint(config.backbone),
    )
    chains = synthetic_chains(args.chains, seed=1, steps=(3, 8), words_per_step=(6, 20))
    windows = chains_to_windows(tokenizer, chains, config.max_length)
    pad_id = pad_token_id(tokenizer)
    batches = [
        collate_windows(batch, pad_id, device) for batch in bucketed_batches(windows, args.batch)
    ]
    tokens = sum(batch.tokens for batch in batches)
    padded = sum(batch.input_ids.numel() for batch in batches)

    def bare() -> float:
        start = time.perf_counter()
        with torch.inference_mode():
            for batch in batches:
                backbone(input_ids=batch.input_ids, attention_mask=(batch.segment_ids >= 0).long())
        return time.perf_counter() - start

    def scoring() -> float:
        start = time.perf_counter()
        for _ in score_chains(prm, chains, batch_size=args.batch):
            pass
        return time.perf_counter() - start

    bare()  # warm-up
    bare_runs, scoring_runs = [], []
    for _ in range(args.repeats):
        bare_runs.append(bare())
        scoring_runs.append(scoring())
    bare_tps, scoring_tps = tokens / min(bare_runs), tokens / min(scoring_runs)
    ratio = scoring_tps / bare_tps
    report = {
        "chains": args.chains,
        "windows": len(windows),
        "tokens": tokens,
        "padding_share": 1 - tokens / padded,
        "bare_tokens_per_s": bare_tps,
        "scoring_tokens_per_s": scoring_tps,
        "ratio": ratio,
        "bare_runs_s": bare_runs,
        "scoring_runs_s": scoring_runs,
        "torch_threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
    }
    rows = [
        ("chains / windows / real tokens", f"{args.chains} / {len(windows)} / {tokens}"),
        ("padding share (bucketed)", f"{report['padding_share']:.3f}"),
        ("bare forward tokens/s", f"{bare_tps:,.0f}"),
        ("score_chains tokens/s", f"{scoring_tps:,.0f}"),
        ("ratio (target >= 0.9)", f"{ratio:.3f}"),
        ("load average 1/5/15 min", " ".join(f"{x:.1f}" for x in os.getloadavg())),
    ]
    width = max(len(name) for name, _ in rows)
    print(TITLE)
    for name, value in rows:
        print(f"  {name:<{width}}  {value:>22}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
