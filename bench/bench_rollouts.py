#!/usr/bin/env python
"""Monte-Carlo rollouts: a chain's step prefixes sharing the engine's batches
(``rollouts.steps_per_call``) against one step per ``generate`` call, same decoder, same
chain, same seeds, in the same process, in completions/s. The values must be equal
(each completion is seeded by its index within its prompt, whatever shares its batch).

    .venv/bin/python bench/bench_rollouts.py                              # tiny decoder, CPU
    .venv/bin/python bench/bench_rollouts.py --shape qwen2.5-math-1.5b --device cuda \\
        --dtype bfloat16 --steps 12 --n 8 --batch 64 --max-new-tokens 256

The decoder has random weights built from a config and a made-up word vocabulary
(``bench_sampling_engine._model_dir``), so nothing is downloaded; with random words no
rollout reaches the reference, which changes no timing (grading a completion is a
regular expression here). After one uncounted warm-up round, each side runs
``--repeats`` times, alternating, and the best run of each counts.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

from bench_sampling_engine import (  # noqa: E402
    _commit,
    _model_dir,
    decoder_arguments,
    decoder_vocab,
    device_name,
)

TITLE = "Steplab Monte-Carlo rollout batching benchmark"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    decoder_arguments(parser)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "out" / "rollouts.json")
    args = parser.parse_args()
    vocab = decoder_vocab(args)

    import torch

    from prm_training.ml.generation import SamplingParams, TransformersEngine
    from prm_training.ml.rollouts import rollout_values, steps_per_call

    torch.set_num_threads(args.threads)
    rng = random.Random(1)
    problem = " ".join(f"w{rng.randrange(2, vocab)}" for _ in range(20))
    steps = [
        " ".join(f"w{rng.randrange(2, vocab)}" for _ in range(rng.randrange(8, 20)))
        for _ in range(args.steps)
    ]
    params = SamplingParams(
        n=args.n, temperature=1.0, top_p=0.95, max_new_tokens=args.max_new_tokens, seed=0
    )
    runs: dict[str, list[float]] = {"grouped": [], "one step a call": []}
    values: dict[str, list[tuple[int, int]]] = {}
    with tempfile.TemporaryDirectory() as root:
        directory = _model_dir(Path(root), args.shape, vocab, args.device)
        engine = TransformersEngine(
            directory, device=args.device, dtype=args.dtype, batch_size=args.batch
        )
        group = steps_per_call(engine, params)
        # Round 0 warms both sides at the measured shapes and is not counted (see
        # bench_sampling_engine).
        for repeat in range(args.repeats + 1):
            for side in runs:
                engine.rows_per_call = args.batch if side == "grouped" else args.n
                if engine.device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                out = rollout_values(problem, steps, "5", engine, params)
                if engine.device.type == "cuda":
                    torch.cuda.synchronize()
                if repeat:
                    runs[side].append(time.perf_counter() - start)
                values[side] = [(v.rollouts, v.reached) for v in out]

    completions = args.steps * args.n
    best = {side: min(seconds) for side, seconds in runs.items()}
    device = device_name(engine)
    print(TITLE)
    print(
        f"commit {_commit()}, {device}, {args.shape} decoder (random weights, vocab {vocab}), "
        f"dtype {args.dtype}, torch {torch.__version__}"
    )
    print(
        f"one chain of {args.steps} steps x n={args.n} rollouts, batch {args.batch} "
        f"({group} steps a call grouped), max_new_tokens {args.max_new_tokens}, "
        f"best of {args.repeats}\n"
    )
    print("side | seconds | completions/s")
    print("--- | --- | ---")
    for side, seconds in best.items():
        print(f"{side} | {seconds:.2f} | {completions / seconds:.1f}")
    ratio = best["one step a call"] / best["grouped"]
    same = values["grouped"] == values["one step a call"]
    print(f"grouped / one step a call | | {ratio:.2f}   (values equal: {same})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "args": {k: str(v) for k, v in vars(args).items()},
                "checks": [
                    {
                        "metric": "grouped / one step a call, completions/s",
                        "value": f"{ratio:.2f}",
                        # Informative: at --quick sizes a call is too short to gain.
                        "target": "",
                        "ok": None,
                    },
                    {"metric": "values equal", "value": str(same), "target": "True", "ok": same},
                ],
                "seconds": best,
            },
            indent=2,
        )
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
