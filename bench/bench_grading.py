#!/usr/bin/env python
"""Answer grading: math-verify (``prm_training/ml/grading.py``) against the grader it
replaced (``prm_training/ml/answers.py`` as of commit 4ec7588, read from git) on every
(final answer, reference) pair the shared data holds, with the truth where the data has it.

    .venv/bin/python bench/bench_grading.py [--data ../shared/data] [--old-commit 4ec7588]

Pairs, by source:

- ``math500 own``: each MATH-500 problem's reference solution (its last ``\\boxed{}``)
  against its ``answer``: truth True.
- ``math500 shifted``: a problem's solution answer against the next problem's reference:
  truth False (where the two references are not the same string).
- ``processbench x math500``: ProcessBench MATH chains whose problem is in MATH-500, their
  final answer against the MATH-500 reference: truth ``final_answer_correct``.
- ``processbench same problem``: ProcessBench chains of a problem that another chain
  answered correctly, against that chain's answer: truth ``final_answer_correct``.
- ``prm800k``: PRM800K chains' "# Answer" and pre-generated answers against the ground
  truth answer: no truth (agreement only).
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import time
import types
from collections.abc import Callable, Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

TITLE = "Steplab answer grading: math-verify against the old grader"

Pair = tuple[str, str, str, bool | None]  # (source, given, reference, truth)


def _old_grader(commit: str) -> Callable[[str, str], bool | None]:
    """``grade_answer`` of ``prm_training/ml/answers.py`` at ``commit``."""
    source = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "show", f"{commit}:prm_training/ml/answers.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    module = types.ModuleType("old_answers")
    exec(compile(source, "old_answers.py", "exec"), module.__dict__)  # noqa: S102
    return module.grade_answer  # type: ignore[no-any-return]


def _pairs(data: Path) -> Iterator[Pair]:
    from prm_training.ml.grading import extract_answer

    math500 = [json.loads(line) for line in (data / "prm800k/math500_problems.jsonl").open()]
    solved = [(extract_answer(p["solution"]) or "", p["answer"]) for p in math500]
    for given, reference in solved:
        yield "math500 own", given, reference, True
    for (given, own), (_, reference) in zip(solved, solved[1:] + solved[:1], strict=True):
        if own.strip() != reference.strip():
            yield "math500 shifted", given, reference, False

    references = {p["problem"].strip(): p["answer"] for p in math500}
    by_problem: dict[str, list[dict]] = collections.defaultdict(list)
    for name in ("gsm8k", "math"):
        for chain in json.loads((data / f"processbench/{name}.json").read_text()):
            by_problem[chain["problem"].strip()].append(chain)
            if name == "math" and chain["problem"].strip() in references:
                given = extract_answer(chain["steps"][-1]) or extract_answer(
                    "\n".join(chain["steps"])
                )
                yield (
                    "processbench x math500",
                    given or "",
                    references[chain["problem"].strip()],
                    chain["final_answer_correct"],
                )
    for chains in by_problem.values():
        right = [c for c in chains if c["final_answer_correct"]]
        if not right:
            continue
        reference = extract_answer("\n".join(right[0]["steps"])) or ""
        for chain in chains:
            if chain is not right[0]:
                given = extract_answer("\n".join(chain["steps"])) or ""
                yield "processbench same problem", given, reference, chain["final_answer_correct"]

    for line in (data / "prm800k/real_records.jsonl").open():
        record = json.loads(line)
        reference = record["question"].get("ground_truth_answer") or ""
        if record["question"].get("pre_generated_answer"):
            yield "prm800k", record["question"]["pre_generated_answer"], reference, None
        last = record["label"]["steps"][-1] if record["label"]["steps"] else {}
        completions, chosen = last.get("completions"), last.get("chosen_completion")
        text = (
            completions[chosen]["text"]
            if completions and chosen is not None
            else (last.get("human_completion") or {}).get("text", "")
        )
        if given := extract_answer(text or ""):
            yield "prm800k", given, reference, None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=REPO_ROOT.parent / "shared" / "data")
    parser.add_argument("--old-commit", default="4ec7588")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "bench" / "out" / "grading.json")
    parser.add_argument("--show", type=int, default=12, help="disagreements to print")
    args = parser.parse_args()
    if not (args.data / "processbench").is_dir():
        print(f"no shared data at {args.data}", file=sys.stderr)
        return 2

    from prm_training.ml.grading import answers_equivalent

    old = _old_grader(args.old_commit)
    pairs = list(_pairs(args.data))
    answers_equivalent("1", r"\frac{2}{2}")  # start the math-verify child outside the timing

    rows: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    seconds = {"old": 0.0, "new": 0.0}
    shown: list[str] = []
    wrong: list[str] = []
    for source, given, reference, truth in pairs:
        start = time.perf_counter()
        a = old(given, reference)
        middle = time.perf_counter()
        b = answers_equivalent(given, reference)
        seconds["old"] += middle - start
        seconds["new"] += time.perf_counter() - middle
        for key in (source, "all"):
            row = rows[key]
            row["pairs"] += 1
            row["agree" if a == b else f"old {a} / new {b}"] += 1
            if truth is not None:
                row["with truth"] += 1
                row["old right"] += a == truth
                row["new right"] += b == truth
        line = f"  {source}: {given!r} vs {reference!r}: old {a}, new {b}, truth {truth}"
        if a != b and len(shown) < args.show:
            shown.append(line)
        if truth is not None and b != truth and len(wrong) < args.show:
            wrong.append(line)

    kinds = sorted({k for row in rows.values() for k in row if " / new " in k})
    print(TITLE)
    print(f"old grader: answers.py at {args.old_commit}; new: grading.answers_equivalent\n")
    header = ["source", "pairs", "agree", *kinds, "with truth", "old right", "new right"]
    print(" | ".join(header))
    print(" | ".join("---" for _ in header))
    for key, row in sorted(rows.items(), key=lambda item: item[0] == "all"):
        print(" | ".join([key, *(str(row[h]) for h in header[1:])]))
    n = max(1, len(pairs))
    print(
        f"\nseconds per pair: old {seconds['old'] / n * 1000:.2f} ms, "
        f"new {seconds['new'] / n * 1000:.2f} ms ({len(pairs)} pairs)"
    )
    if shown:
        print("\nfirst disagreements:")
        print("\n".join(shown))
    if wrong:
        print("\nfirst pairs the new grader gets wrong against the truth:")
        print("\n".join(wrong))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "rows": {k: dict(v) for k, v in rows.items()},
                "ms_per_pair": {k: v / n * 1000 for k, v in seconds.items()},
                "disagreements": shown,
                "new_wrong": wrong,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
