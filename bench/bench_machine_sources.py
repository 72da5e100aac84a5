#!/usr/bin/env python
"""Machine label sources on real weights, against people: Monte-Carlo rollouts from a real
small instruct model, the same model as a judge, and the default PRM, each naming a
chain's earliest wrong step on ProcessBench's GSM8K chains, whose human experts' first
errors are the reference. Beside them, how often the model solves the problems at all.

    .venv/bin/python bench/bench_machine_sources.py \\
        --model var/backbones/Qwen2.5-Coder-0.5B-Instruct --chains 24 --rollouts 4 \\
        --json bench/out/machine_sources.json

Chains: those whose problem has a known answer (a chain of the same problem whose final
answer ProcessBench marks correct names it in its last steps), half with a first error
and half without, drawn with ``--seed``. Per chain:

- ``monte_carlo``: the binary search of ``ml.rollouts.rollout_search`` (OmegaPRM's),
  ``--rollouts`` completions per probed prefix at temperature 0.7, a step reached when any
  rollout ends on the reference (Math-Shepherd's hard label); the first step from which
  none does is its first error. The rollouts continue the model's own chat turn.
- ``judge``: ProcessBench's critique template (``ml.judge``), greedy, one sample.
- ``prm``: the default PRM (frozen bundled MiniLM and its heads, as a first training run
  makes it), trained on the other GSM8K chains (no problem shared) with their ProcessBench
  labels, read by its own first-error readout.
- ``solved``: one greedy solution per problem in the chat template; graded with the
  platform's grader.

Figures: first-error accuracy (the earliest wrong step, or "none", equal to the
experts'), ProcessBench's F1 (harmonic mean of that accuracy on chains with and without
an error), and Cohen's kappa on the steps the experts labeled (each step up to and
including their first error: correct before the source's first error, wrong from it on).
95% intervals by a bootstrap over chains. A chain a source left undecided (an unparsed
judge answer, a search that failed to finish) counts as wrong for accuracy and is left
out of kappa; the table counts them.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(REPO_ROOT / "bench"))

TITLE = "Steplab machine label sources on real weights"
GSM8K = REPO_ROOT.parent / "shared" / "data" / "processbench" / "gsm8k.json"
MODEL = REPO_ROOT / "var" / "backbones" / "Qwen2.5-Coder-0.5B-Instruct"
SOURCES = ("monte_carlo", "judge", "prm")
BOOTSTRAP = 2000


def references(records: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Each problem's answer, read from a chain of it that ProcessBench marks right."""
    from prm_training.ml.grading import extract_answer

    found: dict[str, str] = {}
    for record in records:
        if record["final_answer_correct"] and record["problem"] not in found:
            steps = record["steps"]
            answer = extract_answer(steps[-1]) or extract_answer("\n".join(steps[-2:]))
            if answer:
                found[record["problem"]] = answer
    return found


def pick_chains(records: list[dict[str, Any]], count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` chains with a known answer, half with an expert's first error."""
    known = references(records)
    pool = [dict(r, reference=known[r["problem"]]) for r in records if r["problem"] in known]
    wrong = [r for r in pool if r["label"] >= 0]
    right = [r for r in pool if r["label"] < 0]
    rng = random.Random(seed)
    rng.shuffle(wrong)
    rng.shuffle(right)
    half = count // 2
    return wrong[:half] + right[: count - min(half, len(wrong))]


def _kappa(pairs: Sequence[tuple[bool, bool]]) -> float:
    """Cohen's kappa of two binary raters over ``pairs`` (NaN when undefined)."""
    n = len(pairs)
    if not n:
        return float("nan")
    agree = sum(a == b for a, b in pairs) / n
    pa, pb = sum(a for a, _ in pairs) / n, sum(b for _, b in pairs) / n
    chance = pa * pb + (1 - pa) * (1 - pb)
    return float("nan") if chance >= 1 else (agree - chance) / (1 - chance)


def _step_pairs(human: int, machine: int | None, n_steps: int) -> list[tuple[bool, bool]]:
    """(expert says correct, source says correct) for each step the experts labeled."""
    if machine is None:
        return []
    last = n_steps - 1 if human < 0 else human
    return [(human < 0 or i < human, machine < 0 or i < machine) for i in range(last + 1)]


def figures(rows: Sequence[tuple[int, int | None, int]]) -> dict[str, float]:
    """First-error accuracy, ProcessBench F1 and step kappa of (human, machine, steps)."""
    wrong = [h == m for h, m, _ in rows if h >= 0]
    right = [h == m for h, m, _ in rows if h < 0]
    acc_wrong = sum(wrong) / len(wrong) if wrong else float("nan")
    acc_right = sum(right) / len(right) if right else float("nan")
    f1 = 2 * acc_wrong * acc_right / (acc_wrong + acc_right) if acc_wrong + acc_right > 0 else 0.0
    pairs = [pair for h, m, n in rows for pair in _step_pairs(h, m, n)]
    return {
        "first_error_accuracy": sum(h == m for h, m, _ in rows) / len(rows),
        "processbench_f1": f1,
        "step_kappa": _kappa(pairs),
    }


def bootstrap(
    rows: Sequence[Any], measure: Callable[[Sequence[Any]], dict[str, float]], seed: int
) -> dict[str, tuple[float, float, float]]:
    """Each figure of ``measure(rows)`` with its 95% percentile interval over chains."""
    import math

    rng = random.Random(seed)
    point = measure(rows)
    draws: dict[str, list[float]] = {key: [] for key in point}
    for _ in range(BOOTSTRAP):
        sample = [rows[rng.randrange(len(rows))] for _ in rows]
        for key, value in measure(sample).items():
            if not math.isnan(value):
                draws[key].append(value)
    out = {}
    for key, value in point.items():
        values = sorted(draws[key])
        if not values:
            out[key] = (value, float("nan"), float("nan"))
            continue
        low = values[int(0.025 * (len(values) - 1))]
        high = values[int(0.975 * (len(values) - 1))]
        out[key] = (value, low, high)
    return out


def monte_carlo(engine: Any, chains: Sequence[dict[str, Any]], args: Any) -> list[int | None]:
    """Each chain's first error by the binary search of ``ml.rollouts.first_error_search``
    (what ``rollout_search`` runs for one chain), the chains' searches in lockstep: each
    round probes the middle step of every chain still searching, all in one ``generate``
    call (``--batch`` rows a forward pass), where a rollout run probes one chain at a
    time. Each completion draws from its own seed, so a chain's probes and verdict are the
    ones it would get alone; the CPU time is a fraction."""
    from prm_training.ml.generation import SamplingParams
    from prm_training.ml.grading import answers_equivalent, extract_answer
    from prm_training.ml.rollouts import rollout_prompt
    from prm_training.ml.sampling import sample_prompt

    params = SamplingParams(
        n=args.rollouts, temperature=0.7, max_new_tokens=args.max_new_tokens, seed=args.seed
    )
    # The first error of each chain is in [lo, hi]; hi == its step count means none.
    bounds = [[0, len(chain["steps"])] for chain in chains]
    rounds = 0
    while open_ := [i for i, (lo, hi) in enumerate(bounds) if lo < hi]:
        rounds += 1
        mids = {i: sum(bounds[i]) // 2 for i in open_}
        prompts = [
            rollout_prompt(chains[i]["problem"], chains[i]["steps"], mids[i], engine) for i in open_
        ]
        for i, prompt, completions in zip(
            open_, prompts, engine.generate(prompts, params), strict=True
        ):
            start = len(sample_prompt(chains[i]["problem"], engine))
            reached = any(
                (answer := extract_answer(prompt[start:] + completion.text)) is not None
                and answers_equivalent(answer, chains[i]["reference"]) is True
                for completion in completions
            )
            if reached:
                bounds[i][0] = mids[i] + 1
            else:
                bounds[i][1] = mids[i]
        print(
            f"monte_carlo round {rounds}: {len(open_)} chains probed", file=sys.stderr, flush=True
        )
    return [
        -1 if lo == len(chain["steps"]) else lo
        for (lo, _), chain in zip(bounds, chains, strict=True)
    ]


def judge(engine: Any, chains: Sequence[dict[str, Any]], args: Any) -> list[int | None]:
    """ProcessBench's template, greedy, one critique a chain. The chains go to the engine
    together (``--batch`` rows a forward pass) where a judge run sends one chain at a time:
    greedy decoding gives the same critiques either way, in a fraction of the CPU time."""
    from prm_training.ml.generation import SamplingParams
    from prm_training.ml.judge import DEFAULT_TEMPLATE, judge_prompt, parse_verdict

    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=args.judge_tokens)
    prompts = [
        engine.chat_prompt(judge_prompt(DEFAULT_TEMPLATE, chain["problem"], chain["steps"]))
        for chain in chains
    ]
    found = []
    for chain, [critique] in zip(chains, engine.generate(prompts, params), strict=True):
        found.append(parse_verdict(critique.text, len(chain["steps"])))
    print(f"judge: {found}", file=sys.stderr, flush=True)
    return found


def solved(engine: Any, chains: Sequence[dict[str, Any]], args: Any) -> list[bool]:
    from prm_training.ml.generation import SamplingParams
    from prm_training.ml.grading import answers_equivalent, extract_answer
    from prm_training.ml.sampling import sample_chains

    problems = sorted({chain["problem"] for chain in chains})
    answers = {chain["problem"]: chain["reference"] for chain in chains}
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=args.max_new_tokens)
    outcome = []
    for problem, [completion] in zip(
        problems, sample_chains(problems, engine, params), strict=True
    ):
        answer = extract_answer(completion.text)
        outcome.append(answer is not None and answers_equivalent(answer, answers[problem]) is True)
    return outcome


def prm(
    records: list[dict[str, Any]],
    chains: Sequence[dict[str, Any]],
    backbone: Path | None = None,
    device: str = "auto",
) -> list[int | None]:
    """The default PRM trained on the chains of the other problems, its first errors
    (``backbone``: another encoder than the bundled one, for the smoke test)."""
    from bench_prm_vs_rules import _read

    from prm_training.ml.checkpoint import load_prm
    from prm_training.ml.config import PRMConfig
    from prm_training.ml.launch import train_prm
    from prm_training.ml.score import score_chains

    asked = {chain["problem"] for chain in chains}
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "gsm8k.json"
        path.write_text(json.dumps(records))
        examples = _read([path])
        pool = [e for e in examples if e.problem not in asked]
        by_problem = {(e.problem, e.steps): e for e in examples}
        targets = [by_problem[(c["problem"], tuple(c["steps"]))] for c in chains]
        config = PRMConfig(device=device, **({"backbone": str(backbone)} if backbone else {}))
        result = train_prm(config, pool, [], Path(scratch) / "prm")
        model = load_prm(result.checkpoint_dir)
        found: list[int | None] = []
        for example, scores in zip(targets, score_chains(model, targets), strict=True):
            first = model.readout.first_error(scores.step_probs, example.answer_correct)
            found.append(first)
    return found


def _row(name: str, figures_: dict[str, tuple[float, float, float]], extra: str) -> str:
    cells = [f"{v:.3f} [{lo:.3f}, {hi:.3f}]" for v, lo, hi in figures_.values()]
    return f"| {name} | " + " | ".join(cells) + f" | {extra} |"


def _run_key(args: Any, chains: Sequence[dict[str, Any]]) -> str:
    """What a kept result must match: the model, the settings and the chains drawn."""
    import hashlib

    settings = [args.model.name, args.rollouts, args.max_new_tokens, args.judge_tokens]
    drawn = [[chain["problem"], chain["steps"]] for chain in chains]
    return hashlib.sha256(json.dumps([settings, drawn]).encode()).hexdigest()


def _resumed(path: Path, key: str) -> dict[str, Any]:
    kept = json.loads(path.read_text()) if path.is_file() else {}
    if kept.get("key") != key:
        kept = {"key": key, "verdicts": {}, "seconds": {}}
    return kept


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=GSM8K)
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--chains", type=int, default=24)
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=320)
    parser.add_argument("--judge-tokens", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sources", default=",".join(SOURCES))
    parser.add_argument("--prm-backbone", type=Path, default=None)
    # auto: CUDA when there is one (the GPU node), else the CPU.
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", type=Path, default=REPO_ROOT / "bench" / "out" / "sources.json")
    args = parser.parse_args()

    import torch

    from prm_training.ml.generation import TransformersEngine

    torch.set_num_threads(args.threads)
    records = json.loads(args.data.read_text())
    chains = pick_chains(records, args.chains, args.seed)
    chosen = args.sources.split(",")
    engine = TransformersEngine(args.model, device=args.device, batch_size=args.batch)
    # Each source's result is kept as it ends (``<json>.partial``): a run stopped midway
    # resumes with what the same chains and settings already gave.
    partial = args.json.with_suffix(".partial.json")
    done = _resumed(partial, _run_key(args, chains))
    verdicts: dict[str, list[int | None]] = done["verdicts"]
    seconds: dict[str, float] = done["seconds"]
    for name in ("solved", *chosen):
        if name in seconds:
            print(f"{name}: kept from {partial}", file=sys.stderr, flush=True)
            continue
        start = time.monotonic()
        if name == "solved":
            done["solved"] = solved(engine, chains, args)
        elif name == "prm":
            verdicts[name] = prm(records, chains, args.prm_backbone, args.device)
        else:
            verdicts[name] = {"monte_carlo": monte_carlo, "judge": judge}[name](
                engine, chains, args
            )
        seconds[name] = time.monotonic() - start
        print(f"{name}: {seconds[name]:.0f} s", file=sys.stderr, flush=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(done))
    solved_share = done["solved"]
    verdicts = {name: verdicts[name] for name in chosen}

    human = [int(chain["label"]) for chain in chains]
    report: dict[str, Any] = {
        "model": args.model.name,
        "chains": len(chains),
        "with_error": sum(h >= 0 for h in human),
        "rollouts": args.rollouts,
        "seed": args.seed,
        "machine": platform.node(),
        "solved": sum(solved_share) / len(solved_share),
        "problems": len(solved_share),
        "seconds": seconds,
        "sources": {},
    }
    print(f"# {TITLE}\n")
    print(
        f"{len(chains)} GSM8K chains ({report['with_error']} with an expert's first error), "
        f"{args.model.name}; the model solves {sum(solved_share)} of {len(solved_share)} "
        "problems (greedy)\n"
    )
    print("| source | first-error acc | ProcessBench F1 | step kappa | undecided, seconds |")
    print("|---|---|---|---|---|")
    for name, found in verdicts.items():
        rows = [(h, m, len(c["steps"])) for h, m, c in zip(human, found, chains, strict=True)]
        measured = bootstrap(rows, figures, args.seed)
        undecided = sum(m is None for m in found)
        report["sources"][name] = {"figures": measured, "verdicts": found}
        print(_row(name, measured, f"{undecided}, {seconds[name]:.0f}"))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
