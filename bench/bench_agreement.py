#!/usr/bin/env python
"""Agreement benchmark: time of ``agreement_compute``'s work at 100,000 annotations.

    .venv/bin/python bench/bench_agreement.py [--annotations 100000] [--steps 8]
        [--overlap 3] [--annotators 40]

Synthetic data shaped like a project: annotations / overlap chains of ``--steps`` steps,
each labeled by ``--overlap`` distinct annotators out of ``--annotators``, first_error
style (a pass stops at its first -1, so later steps are missing). It times the three
parts separately:

- ``rows_to_numpy``: turning the values_list rows (Python tuples, as the query returns
  them) into arrays and keeping one pass per (chain, annotator), i.e. the Python side
  of ``current_human_ratings``;
- ``alpha``: Krippendorff's alpha overall, per annotator and per pair;
- ``first_error``: first-error agreement.

The database's own time for the single query is not included (it is one indexed join
over the ratings; measure it with EXPLAIN ANALYZE on a real project). Figures go to
stdout and bench/out/agreement.json. A measurement, not a test.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from annotation.quality.agreement_math import (  # noqa: E402
    first_error_agreement,
    krippendorff_alpha_ordinal,
)


def synthetic_rows(
    *, annotations: int, steps: int, overlap: int, annotators: int, seed: int = 0
) -> list[tuple[int, int, int, int, int, int]]:
    """(chain, annotation, annotator, step id, step index, rating) rows."""
    rng = np.random.default_rng(seed)
    chains = annotations // overlap
    truth = rng.choice([-1, 0, 1], p=[0.15, 0.1, 0.75], size=(chains, steps))
    rows = []
    annotation_id = 0
    for chain in range(chains):
        coders = rng.choice(annotators, size=overlap, replace=False)
        for coder in coders.tolist():
            annotation_id += 1
            noisy = np.where(rng.random(steps) < 0.15, rng.integers(-1, 2, steps), truth[chain])
            for index, rating in enumerate(noisy.tolist()):
                rows.append((chain, annotation_id, coder, chain * steps + index, index, rating))
                if rating == -1:
                    break  # first_error mode: nothing asked after the first error
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--annotations", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--overlap", type=int, default=3)
    parser.add_argument("--annotators", type=int, default=40)
    args = parser.parse_args()
    rows = synthetic_rows(
        annotations=args.annotations,
        steps=args.steps,
        overlap=args.overlap,
        annotators=args.annotators,
    )

    start = time.perf_counter()
    data = np.array(rows, dtype=np.int64).reshape(-1, 6)
    chain, annotation, annotator = data[:, 0], data[:, 1], data[:, 2]
    order = np.lexsort((-annotation, annotator, chain))
    group_start = np.ones(order.size, dtype=bool)
    group_start[1:] = (chain[order][1:] != chain[order][:-1]) | (
        annotator[order][1:] != annotator[order][:-1]
    )
    newest = np.maximum.accumulate(np.where(group_start, np.arange(order.size), 0))
    data = data[np.sort(order[annotation[order] == annotation[order][newest]])]
    to_numpy = time.perf_counter() - start

    start = time.perf_counter()
    alpha = krippendorff_alpha_ordinal(unit=data[:, 3], coder=data[:, 2], value=data[:, 5])
    alpha_s = time.perf_counter() - start

    start = time.perf_counter()
    first = first_error_agreement(
        chain=data[:, 0], coder=data[:, 2], step_index=data[:, 4], value=data[:, 5]
    )
    first_s = time.perf_counter() - start

    result = {
        "annotations": args.annotations,
        "ratings": int(data.shape[0]),
        "annotators": args.annotators,
        "pairs": len(alpha.pairs),
        "alpha": alpha.alpha,
        "first_error_share": first.share,
        "rows_to_numpy_s": round(to_numpy, 3),
        "alpha_s": round(alpha_s, 3),
        "first_error_s": round(first_s, 3),
        "total_s": round(to_numpy + alpha_s + first_s, 3),
    }
    for key, value in result.items():
        print(f"{key:>18}: {value}")
    out = Path(__file__).resolve().parent / "out" / "agreement.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
