#!/usr/bin/env python
"""Does the default PRM beat the rules that read no step? Held-out ProcessBench F1, step
AUROC and first-error accuracy of PRM settings trained on the whole labeled pool, against
the two model-free baselines fitted on the same pool, paired by seed.

    .venv/bin/python bench/bench_prm_vs_rules.py [--seeds 50]
        [--data ../shared/data/processbench/gsm8k.json ../shared/data/processbench/math.json]
        [--chains N] [--backbone DIR] [--variant NAME=key:value,key:value ...]
        [--out bench/out/prm_vs_rules.json]

Per seed: the chains are split by problem (20% held out, a different split per seed, as
``simulate_active_learning`` does), every variant trains on the whole pool with that seed
and is scored on the held-out chains, and the baselines are fitted on the pool. Each line
gives the mean over seeds and the paired difference with the outcome rule and with the
position prior, with 95% intervals (Student's t over seeds): an interval holding 0 is no
difference. The default variants are the settings before 2026-11-25 (the separator's
state, no context, no calibration, one threshold), the prefix-only model (DESIGN.md's
invariant 3), today's default read with one threshold for every chain, and today's
default. The rules are scored with the default's readout.

The bundled MiniLM runs once per chain and step pooling (the feature cache); after that a
seed costs one head training per variant.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

SHARED = REPO_ROOT.parent / "shared" / "data" / "processbench"
DEFAULT_VARIANTS = (
    "before=step_pooling:separator,context:none,calibrate:false,outcome_readout:false",
    "prefix-only=context:prefix",
    "one-threshold=outcome_readout:false",
    "default=",
)
METRICS = ("processbench_f1", "step_auroc", "first_error_accuracy")
SHORT = {"processbench_f1": "F1", "step_auroc": "AUROC", "first_error_accuracy": "FE acc"}


def _parse_variant(text: str) -> tuple[str, dict[str, object]]:
    name, _, settings = text.partition("=")
    values: dict[str, object] = {}
    for item in filter(None, settings.split(",")):
        key, _, raw = item.partition(":")
        values[key] = {"true": True, "false": False}.get(raw.lower(), raw)
        if isinstance(values[key], str) and raw.lstrip("-").replace(".", "", 1).isdigit():
            values[key] = float(raw) if "." in raw else int(raw)
    return name, values


def _read(paths: list[Path]) -> list:
    from prm_training.ml.data import ChainExample

    examples = []
    for path in paths:
        for record in json.loads(path.read_text()):
            label = int(record["label"])
            steps = tuple(record["steps"])
            labels = tuple(
                1 if i < label or label < 0 else -1 if i == label else None
                for i in range(len(steps))
            )
            examples.append(
                ChainExample(
                    chain_id=len(examples) + 1,
                    problem=record["problem"],
                    steps=steps,
                    labels=labels,
                    answer_correct=bool(record["final_answer_correct"]),
                )
            )
    return examples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--chains", type=int, default=0, help="first N chains only (0: all)")
    parser.add_argument("--backbone", default="", help="model directory (default: bundled)")
    parser.add_argument(
        "--data", type=Path, nargs="+", default=[SHARED / "gsm8k.json", SHARED / "math.json"]
    )
    parser.add_argument("--variant", action="append", default=None)
    parser.add_argument("--heldout-fraction", type=float, default=0.2)
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "bench" / "out" / "prm_vs_rules.json"
    )
    args = parser.parse_args()

    import numpy as np

    from prm_training.ml.config import PRMConfig
    from prm_training.ml.paired import interval
    from prm_training.ml.simulate import split_by_problem
    from prm_training.ml.train import train_prm

    chains = _read(args.data)
    if args.chains:
        chains = chains[: args.chains]
    base = PRMConfig(backbone=args.backbone) if args.backbone else PRMConfig()
    variants = [_parse_variant(text) for text in (args.variant or DEFAULT_VARIANTS)]
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in variants}
    results["outcome_rule"], results["position_prior"] = [], []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        for seed in range(args.seeds):
            pool, heldout = split_by_problem(chains, args.heldout_fraction, seed=seed)
            for name, settings in variants:
                config = replace(base, seed=seed, **settings)  # type: ignore[arg-type]
                metrics = train_prm(config, pool, heldout, Path(scratch) / name).metrics
                # A metric the held-out chains cannot define (one class missing) is NaN.
                results[name].append({m: metrics.get(m, math.nan) for m in METRICS})
            for rule in ("outcome_rule", "position_prior"):
                results[rule].append(
                    {m: metrics.get(f"baseline_{rule}_{m}", math.nan) for m in METRICS}
                )
            print(
                f"seed {seed}: "
                + "  ".join(f"{n} {results[n][-1]['processbench_f1']:.3f}" for n in results),
                file=sys.stderr,
                flush=True,
            )
    elapsed = time.perf_counter() - started

    print(
        f"{len(chains)} chains from {', '.join(p.name for p in args.data)}; {args.seeds} seeds, "
        f"{args.heldout_fraction:.0%} held out by problem; {elapsed:.0f} s"
    )
    header = f"{'':<14}" + "".join(f"{SHORT[m]:>8}" for m in METRICS)
    header += "".join(
        f"  {SHORT[m] + ' vs ' + rule:<26}" for rule in ("outcome", "prior") for m in METRICS[:2]
    )
    print(header)
    summary: dict[str, dict[str, object]] = {}
    checks: list[dict[str, object]] = []
    for name, runs in results.items():
        means = {m: float(np.nanmean([run[m] for run in runs])) for m in METRICS}
        versus = {
            f"{m}_vs_{rule}": interval(
                [
                    run[m] - base[m]
                    for run, base in zip(runs, results[rule], strict=True)
                    if not (math.isnan(run[m]) or math.isnan(base[m]))
                ]
            )
            for rule in ("outcome_rule", "position_prior")
            for m in METRICS
        }
        summary[name] = {"mean": means, **{k: str(v) for k, v in versus.items()}}
        if name not in ("outcome_rule", "position_prior"):
            for m in METRICS[:2]:
                gap = versus[f"{m}_vs_outcome_rule"]
                checks.append(
                    {
                        "metric": f"{name}: {SHORT[m]} vs the outcome rule",
                        "value": f"{gap} ({gap.verdict})",
                        "target": "> 0, interval excluding it",
                        "ok": gap.verdict == "better",
                    }
                )
        line = f"{name:<14}" + "".join(f"{means[m]:>8.3f}" for m in METRICS)
        for rule in ("outcome_rule", "position_prior"):
            for m in METRICS[:2]:
                line += f"  {str(versus[f'{m}_vs_{rule}']):<26}"
        print(line)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {"seconds": elapsed, "seeds": args.seeds, "checks": checks, "summary": summary},
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
