#!/usr/bin/env python
"""Does the default PRM beat the baselines that read no step? Held-out ProcessBench F1
(pooled, per subset and their mean), step AUROC, first-error accuracy and "right answer,
flawed process" of PRM settings trained on the whole labeled pool, against the three
baselines fitted on the same pool, paired by seed, with intervals corrected for the
seeds' overlapping splits.

    .venv/bin/python bench/bench_prm_vs_rules.py [--seeds 20]
        [--data ../shared/data/processbench/gsm8k.json ../shared/data/processbench/math.json]
        [--chains N] [--backbone DIR] [--variant NAME=key:value,key:value ...]
        [--transfer] [--cache-dir DIR] [--out bench/out/prm_vs_rules.json]

Per seed: the chains are split by problem (20% held out, a different split per seed, as
``simulate_active_learning`` does), every variant trains on the whole pool with that seed
and is scored on the held-out chains, and the baselines (the outcome rule, the position
prior and the text-blind head: ``prm_training.ml.baselines``) are fitted on the pool. A
chain's subset is its file's (ProcessBench's record ids say the same). Each line gives
the mean over seeds and the paired difference with the strongest baseline on each
figure (the baseline with the best mean there), 95% intervals by the corrected
resampled t (``prm_training.ml.paired.resampled_interval``): an interval holding 0 is
no difference. The default variants are the prefix-only model (DESIGN.md's invariant 3)
and today's default.

``--transfer`` adds, per pair of files A -> B, a PRM trained on A's pool only and scored
on B's held-out chains, paired with the same PRM trained on B's own pool: what training
on one domain and labeling another costs.

The bundled MiniLM runs once per chain and step pooling (the feature cache, on disk with
``--cache-dir``); after that a seed costs one head training per variant and one for the
text-blind head.
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
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

SHARED = REPO_ROOT.parent / "shared" / "data" / "processbench"
DEFAULT_VARIANTS = ("prefix-only=context:prefix", "default=")
BASELINES = ("outcome_rule", "position_prior", "text_blind")
FIGURES = (
    "processbench_f1",
    "mean_subset_f1",
    "step_auroc",
    "first_error_accuracy",
    "right_answer_recall",
)
SHORT = {
    "processbench_f1": "F1",
    "mean_subset_f1": "sub F1",
    "step_auroc": "AUROC",
    "first_error_accuracy": "FE acc",
    "right_answer_recall": "RA rec",
}
# The differences the table shows, against the strongest baseline on each.
VERSUS = ("mean_subset_f1", "processbench_f1", "step_auroc")


def _parse_variant(text: str) -> tuple[str, dict[str, object]]:
    name, _, settings = text.partition("=")
    values: dict[str, object] = {}
    for item in filter(None, settings.split(",")):
        key, _, raw = item.partition(":")
        values[key] = {"true": True, "false": False}.get(raw.lower(), raw)
        if isinstance(values[key], str) and raw.lstrip("-").replace(".", "", 1).isdigit():
            values[key] = float(raw) if "." in raw else int(raw)
    return name, values


def _read(paths: list[Path], per_file: int = 0) -> list[Any]:
    """Every file's chains (``per_file`` of them, spread evenly over the file, when given:
    ProcessBench's files list their chains with an error first), labeled by first error."""
    from prm_training.ml.data import ChainExample
    from prm_training.ml.evaluation import subset_of

    examples = []
    for path in paths:
        records = json.loads(path.read_text())
        if per_file:
            records = records[:: max(1, math.ceil(len(records) / per_file))]
        for record in records:
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
                    subset=subset_of(record_id=record.get("id"), source=path.name),
                )
            )
    return examples


def _figures(metrics: dict[str, float], prefix: str = "") -> dict[str, float]:
    """The figures of one scorer in a run's metrics (NaN where undefined), per subset
    as ``subset_f1:<name>``."""
    out = {m: float(metrics.get(f"{prefix}{m}", math.nan)) for m in FIGURES}
    for key, value in metrics.items():
        if key.startswith(f"{prefix}subset_f1:"):
            out[key.removeprefix(prefix)] = float(value)
    return out


def _run_seeds(args: argparse.Namespace, chains: list[Any], base: Any) -> dict[str, list[dict]]:
    from prm_training.ml.launch import train_prm
    from prm_training.ml.oracle import split_by_problem

    variants = [_parse_variant(text) for text in (args.variant or DEFAULT_VARIANTS)]
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in variants}
    results.update({name: [] for name in BASELINES})
    # The baselines are fitted once a seed, with the default's settings (the text-blind
    # head reads what the default reads but the step): with "default", else the last.
    names = [name for name, _ in variants]
    fits = "default" if "default" in names else names[-1]
    with tempfile.TemporaryDirectory() as scratch:
        for seed in range(args.seeds):
            pool, heldout = split_by_problem(chains, args.heldout_fraction, seed=seed)
            for name, settings in variants:
                config = replace(base, seed=seed, **settings)  # type: ignore[arg-type]
                metrics = train_prm(
                    config, pool, heldout, Path(scratch) / name, baselines=name == fits
                ).metrics
                results[name].append(_figures(metrics))
                if name == fits:
                    for rule in BASELINES:
                        results[rule].append(_figures(metrics, f"baseline_{rule}_"))
            print(
                f"seed {seed}: "
                + "  ".join(f"{n} {results[n][-1]['mean_subset_f1']:.3f}" for n in results),
                file=sys.stderr,
                flush=True,
            )
    return results


def _transfer(args: argparse.Namespace, base: Any) -> list[dict[str, Any]]:
    """Per ordered pair of files (A, B): the default trained on A's pool, and on B's own,
    both scored on B's held-out chains, paired by seed."""
    from prm_training.ml.launch import train_prm
    from prm_training.ml.oracle import split_by_problem
    from prm_training.ml.paired import resampled_interval

    by_file = {path.stem: _read([path], args.chains) for path in args.data}
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for source in by_file:
            for target in by_file:
                if source == target:
                    continue
                own, moved = [], []
                for seed in range(args.seeds):
                    config = replace(base, seed=seed)
                    pool, heldout = split_by_problem(
                        by_file[target], args.heldout_fraction, seed=seed
                    )
                    other, _ = split_by_problem(by_file[source], args.heldout_fraction, seed=seed)
                    out = Path(scratch) / "prm"
                    own.append(train_prm(config, pool, heldout, out, baselines=False).metrics)
                    moved.append(train_prm(config, other, heldout, out, baselines=False).metrics)
                gap = {
                    m: resampled_interval(
                        [
                            b.get(m, math.nan) - a.get(m, math.nan)
                            for a, b in zip(own, moved, strict=True)
                        ],
                        heldout_fraction=args.heldout_fraction,
                    )
                    for m in ("processbench_f1", "step_auroc")
                }
                rows.append(
                    {
                        "trained_on": source,
                        "scored_on": target,
                        "own": {m: _mean([r.get(m, math.nan) for r in own]) for m in gap},
                        "moved": {m: _mean([r.get(m, math.nan) for r in moved]) for m in gap},
                        "versus_own": {m: str(v) for m, v in gap.items()},
                    }
                )
    return rows


def _mean(values: list[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else math.nan


def _summary(
    results: dict[str, list[dict[str, float]]], heldout_fraction: float
) -> tuple[list[str], dict[str, Any], list[dict[str, Any]]]:
    """The table's lines, the JSON summary and the checks."""
    from prm_training.ml.paired import resampled_interval

    subsets = sorted({k for runs in results.values() for r in runs for k in r if ":" in k})
    columns = [*FIGURES, *subsets]
    means = {
        name: {c: _mean([run.get(c, math.nan) for run in runs]) for c in columns}
        for name, runs in results.items()
    }
    strongest = {
        m: max(BASELINES, key=lambda b: -math.inf if math.isnan(means[b][m]) else means[b][m])
        for m in VERSUS
    }
    header = f"{'':<16}" + "".join(
        f"{SHORT[c] if c in SHORT else c.split(':', 1)[1]:>9}" for c in columns
    )
    header += "".join(f"  {SHORT[m] + ' vs ' + strongest[m]:<30}" for m in VERSUS)
    lines, summary, checks = [header], {}, []
    for name, runs in results.items():
        versus = {
            m: resampled_interval(
                [
                    run[m] - best[m]
                    for run, best in zip(runs, results[strongest[m]], strict=True)
                    if not (math.isnan(run[m]) or math.isnan(best[m]))
                ],
                heldout_fraction=heldout_fraction,
            )
            for m in VERSUS
        }
        summary[name] = {
            "mean": means[name],
            **{f"{m}_vs_strongest": str(v) for m, v in versus.items()},
        }
        if name not in BASELINES:
            for m in VERSUS:
                checks.append(
                    {
                        "metric": f"{name}: {SHORT[m]} vs the strongest baseline ({strongest[m]})",
                        "value": f"{versus[m]} ({versus[m].verdict})",
                        "target": "> 0, interval excluding it",
                        "ok": versus[m].verdict == "better",
                    }
                )
        line = f"{name:<16}" + "".join(f"{means[name][c]:>9.3f}" for c in columns)
        line += "".join(f"  {str(versus[m]):<30}" for m in VERSUS)
        lines.append(line)
    return lines, {"strongest": strongest, **summary}, checks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument(
        "--chains", type=int, default=0, help="N chains of each file, spread over it (0: all)"
    )
    parser.add_argument("--backbone", default="", help="model directory (default: bundled)")
    parser.add_argument(
        "--data", type=Path, nargs="+", default=[SHARED / "gsm8k.json", SHARED / "math.json"]
    )
    parser.add_argument("--variant", action="append", default=None)
    parser.add_argument("--heldout-fraction", type=float, default=0.2)
    parser.add_argument("--transfer", action="store_true", help="train on one file, score another")
    parser.add_argument("--cache-dir", default=None, help="feature cache on disk, kept for reruns")
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "bench" / "out" / "prm_vs_rules.json"
    )
    args = parser.parse_args()

    from prm_training.ml.config import PRMConfig

    chains = _read(args.data, args.chains)
    base = PRMConfig(cache_dir=args.cache_dir)
    if args.backbone:
        base = replace(base, backbone=args.backbone)
    started = time.perf_counter()
    results = _run_seeds(args, chains, base)
    transfer = _transfer(args, base) if args.transfer else []
    elapsed = time.perf_counter() - started

    print(
        f"{len(chains)} chains from {', '.join(p.name for p in args.data)}; {args.seeds} seeds, "
        f"{args.heldout_fraction:.0%} held out by problem; {elapsed:.0f} s. Δ: paired "
        "difference with the strongest baseline on that figure, 95% interval corrected for "
        "the seeds' overlapping splits (holding 0: no difference)"
    )
    lines, summary, checks = _summary(results, args.heldout_fraction)
    print("\n".join(lines))
    for row in transfer:
        own, moved, gap = row["own"], row["moved"], row["versus_own"]
        print(
            f"transfer {row['trained_on']} -> {row['scored_on']}: "
            f"F1 {moved['processbench_f1']:.3f} (trained on {row['scored_on']}: "
            f"{own['processbench_f1']:.3f}, {gap['processbench_f1']}), AUROC "
            f"{moved['step_auroc']:.3f} ({own['step_auroc']:.3f}, {gap['step_auroc']})"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "seconds": elapsed,
                "seeds": args.seeds,
                "checks": checks,
                "summary": summary,
                "transfer": transfer,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
