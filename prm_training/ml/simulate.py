"""Active-learning simulation: replay labeled chains as the oracle to compare acquisition
strategies before spending annotator hours (``manage.py simulate_active_learning``).

The protocol, per seed:

1. A held-out part is split off once, by problem (no problem has chains on both sides, so
   the held-out score is not inflated by near-duplicate solutions), and is the same for
   every seed and strategy.
2. A random seed set of ``seed_size`` chains is drawn from the rest (the pool); it is the
   same for every strategy of that seed, so strategies are compared on paired runs.
3. Round 0 trains on the seed set and evaluates on the held-out part. Then, per round and
   strategy, the current model scores the still-unlabeled pool, ``select_batch`` picks
   ``batch`` chains, their labels are revealed, the PRM is retrained from scratch on all
   labeled chains and evaluated again.

In ``frozen_head`` mode the backbone runs once per chain (the feature cache), so a round
costs a head training and two cache look-ups; the first pass over the chains is the cost.
Pure: no Django, takes ``ChainExample``s, returns rows.
"""

from __future__ import annotations

import math
import tempfile
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np

from .acquisition import STRATEGIES
from .config import PRMConfig
from .data import ChainExample

BASELINE = "random"
METRICS = ("processbench_f1", "step_auroc", "first_error_accuracy")


@dataclass(frozen=True)
class SimulationConfig:
    strategies: tuple[str, ...]
    rounds: int
    batch: int
    seeds: tuple[int, ...] = (0, 1, 2)
    seed_size: int = 20
    heldout_fraction: float = 0.2
    random_fraction: float = 0.2  # the platform's default mix (ScoringRun.random_fraction)
    split_seed: int = 0  # the held-out split is fixed, whatever the seeds

    def __post_init__(self) -> None:
        unknown = [name for name in self.strategies if name not in STRATEGIES]
        if unknown:
            raise ValueError(
                f"unknown strategy {', '.join(map(repr, unknown))}; choose from "
                f"{', '.join(STRATEGIES)}"
            )
        if not self.strategies:
            raise ValueError("give at least one strategy")
        if len(set(self.strategies)) != len(self.strategies):
            raise ValueError("a strategy is listed twice")
        if self.rounds < 1 or self.batch < 1 or self.seed_size < 1:
            raise ValueError("rounds, batch and seed size must be at least 1")
        if not self.seeds:
            raise ValueError("give at least one seed")
        if not 0.0 < self.heldout_fraction < 1.0:
            raise ValueError("the held-out fraction must be between 0 and 1 (exclusive)")
        if not 0.0 <= self.random_fraction <= 1.0:
            raise ValueError("the random fraction must be within [0, 1]")


@dataclass(frozen=True)
class SimulationRow:
    """One evaluation: a metric the held-out chains cannot define is NaN."""

    strategy: str
    seed: int
    round: int
    labeled_chains: int
    processbench_f1: float
    step_auroc: float
    first_error_accuracy: float


ROW_FIELDS = tuple(f.name for f in fields(SimulationRow))


def oracle_chains(examples: Sequence[ChainExample]) -> list[ChainExample]:
    """The chains that can serve as the oracle: those with at least one rated step."""
    return [
        example
        for example in examples
        if example.labels is not None and any(rating is not None for rating in example.labels)
    ]


def split_by_problem(
    examples: Sequence[ChainExample], heldout_fraction: float, *, seed: int = 0
) -> tuple[list[ChainExample], list[ChainExample]]:
    """(pool, held-out): whole problems go to the held-out part, in a seeded random order,
    until it holds at least ``heldout_fraction`` of the chains.

    >>> chains = [ChainExample(i, f"p{i // 2}", ("s",), (1,)) for i in range(10)]
    >>> pool, heldout = split_by_problem(chains, 0.3)
    >>> len(heldout), {c.problem for c in pool} & {c.problem for c in heldout}
    (4, set())
    """
    by_problem: dict[str, list[ChainExample]] = defaultdict(list)
    for example in examples:
        by_problem[example.problem.strip()].append(example)
    problems = sorted(by_problem)
    np.random.default_rng(seed).shuffle(problems)
    want = math.ceil(heldout_fraction * len(examples))
    heldout: list[ChainExample] = []
    taken: set[str] = set()
    for problem in problems:
        if len(heldout) >= want:
            break
        heldout.extend(by_problem[problem])
        taken.add(problem)
    pool = [example for example in examples if example.problem.strip() not in taken]
    return pool, heldout


def _row(
    strategy: str, seed: int, round_: int, labeled: int, metrics: Mapping[str, float]
) -> SimulationRow:
    return SimulationRow(
        strategy=strategy,
        seed=seed,
        round=round_,
        labeled_chains=labeled,
        **{name: float(metrics.get(name, math.nan)) for name in METRICS},
    )


def simulate(
    examples: Sequence[ChainExample],
    sim: SimulationConfig,
    prm: PRMConfig,
    *,
    answers_correct: Mapping[int, bool | None] | None = None,
    work_dir: str | Path | None = None,
    progress: Callable[[], None] | None = None,
) -> list[SimulationRow]:
    """Runs the protocol of the module docstring; rows for round 0..``rounds`` of every
    (strategy, seed). ``answers_correct`` maps chain_id to its final answer's grade (for
    ``convincing_wrong``; a missing id is ungraded). ``progress`` is called after each
    training. Raises ValueError when the chains cannot support the requested run."""
    from .acquisition import select_batch
    from .score import load_prm, score_chains
    from .train import train_prm

    chains = oracle_chains(examples)
    if not chains:
        raise ValueError("no chain carries a step label: the simulation needs labeled data")
    pool, heldout = split_by_problem(chains, sim.heldout_fraction, seed=sim.split_seed)
    needed = sim.seed_size + sim.rounds * sim.batch
    if not heldout or len(pool) < needed:
        raise ValueError(
            f"too few labeled chains: {len(chains)} split by problem into {len(pool)} for "
            f"selection and {len(heldout)} held out, but seed size {sim.seed_size} + "
            f"{sim.rounds} rounds x batch {sim.batch} needs {needed} for selection"
        )
    graded = answers_correct or {}
    rows: list[SimulationRow] = []
    with tempfile.TemporaryDirectory(dir=work_dir) as scratch:
        checkpoint = Path(scratch) / "prm"

        def train(labeled: list[int], seed: int) -> dict[str, float]:
            config = replace(prm, seed=seed, heldout_metrics=True)
            result = train_prm(config, [pool[i] for i in labeled], heldout, checkpoint)
            if progress is not None:
                progress()
            return result.metrics

        for seed in sim.seeds:
            rng = np.random.default_rng(seed)
            seed_set = sorted(int(i) for i in rng.choice(len(pool), sim.seed_size, replace=False))
            # Round 0 is the same model for every strategy of this seed: train it once.
            first_metrics = train(seed_set, seed)
            first_prm = load_prm(checkpoint)
            for strategy in sim.strategies:
                rows.append(_row(strategy, seed, 0, len(seed_set), first_metrics))
                # Each strategy draws its own random stream, independent of list order.
                strategy_rng = np.random.default_rng([seed, STRATEGIES.index(strategy)])
                labeled = list(seed_set)
                model = first_prm
                for round_ in range(1, sim.rounds + 1):
                    taken = set(labeled)
                    unlabeled = [i for i in range(len(pool)) if i not in taken]
                    # The model sees texts only: labels stay with the oracle until chosen.
                    hidden = [replace(pool[i], labels=None) for i in unlabeled]
                    scores = list(score_chains(model, hidden))
                    correct = [graded.get(pool[i].chain_id) for i in unlabeled]
                    picked = select_batch(
                        strategy,
                        scores,
                        sim.batch,
                        random_fraction=sim.random_fraction,
                        answers_correct=correct,
                        rng=strategy_rng,
                    )
                    labeled.extend(unlabeled[i] for i in picked)
                    metrics = train(labeled, seed)
                    rows.append(_row(strategy, seed, round_, len(labeled), metrics))
                    if round_ < sim.rounds:
                        model = load_prm(checkpoint)
    return rows


def mean_curves(rows: Sequence[SimulationRow], metric: str) -> dict[str, list[tuple[int, float]]]:
    """Per strategy, (labeled chains, mean of ``metric`` over seeds) by round, NaNs skipped."""
    values: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        value = getattr(row, metric)
        if not math.isnan(value):
            values[row.strategy][row.labeled_chains].append(value)
    return {
        strategy: [(n, float(np.mean(v))) for n, v in sorted(by_n.items())]
        for strategy, by_n in values.items()
    }


def chains_to_reach_baseline(
    rows: Sequence[SimulationRow], metric: str = "processbench_f1", baseline: str = BASELINE
) -> tuple[float, dict[str, int | None]]:
    """(target, {strategy: labeled chains from which its mean ``metric`` reaches the target
    and stays there to the last round, or None}), the target being ``baseline``'s mean at
    its last round. "And stays": on a noisy curve a single lucky round (round 0 included,
    which every strategy shares) would otherwise count as reaching it.

    >>> rows = [SimulationRow("random", 0, r, 10 * (r + 1), f, 0.5, 0.5)
    ...         for r, f in enumerate((0.7, 0.4, 0.6))]
    >>> rows += [SimulationRow("entropy", 0, r, 10 * (r + 1), f, 0.5, 0.5)
    ...          for r, f in enumerate((0.5, 0.6, 0.65))]
    >>> chains_to_reach_baseline(rows)
    (0.6, {'random': 30, 'entropy': 20})
    """
    curves = mean_curves(rows, metric)
    if baseline not in curves:
        raise ValueError(f"the baseline strategy {baseline!r} has no {metric} to compare with")
    target = curves[baseline][-1][1]
    reached: dict[str, int | None] = {}
    for strategy, curve in curves.items():
        reached[strategy] = None
        # Walk back from the last round while the curve holds the target (a tiny tolerance:
        # the baseline must reach its own final mean exactly).
        for n, value in reversed(curve):
            if value < target - 1e-12:
                break
            reached[strategy] = n
    return target, reached


def write_csv(rows: Sequence[SimulationRow], path: str | Path) -> None:
    import csv

    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=ROW_FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow(
                {
                    key: (f"{value:.6f}" if isinstance(value, float) else value)
                    for key, value in asdict(row).items()
                }
            )


def plot_learning_curves(rows: Sequence[SimulationRow], path: str | Path) -> None:
    """Two panels, held-out ProcessBench F1 and step AUROC against labeled chains: one line
    per strategy (mean over seeds) with a shaded min-max band over seeds."""
    import matplotlib

    matplotlib.use("Agg")  # headless: a worker or CI has no display
    import matplotlib.pyplot as plt

    strategies = list(dict.fromkeys(row.strategy for row in rows))
    seeds = sorted({row.seed for row in rows})
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for axis, metric, title in zip(
        axes,
        ("processbench_f1", "step_auroc"),
        ("held-out ProcessBench F1", "held-out step AUROC"),
        strict=True,
    ):
        for strategy in strategies:
            by_n: dict[int, list[float]] = defaultdict(list)
            for row in rows:
                value = getattr(row, metric)
                if row.strategy == strategy and not math.isnan(value):
                    by_n[row.labeled_chains].append(value)
            if not by_n:
                continue
            xs = sorted(by_n)
            mean = [float(np.mean(by_n[x])) for x in xs]
            (line,) = axis.plot(
                xs,
                mean,
                marker="o",
                markersize=3,
                label=strategy,
                linestyle="--" if strategy == BASELINE else "-",
            )
            axis.fill_between(
                xs,
                [min(by_n[x]) for x in xs],
                [max(by_n[x]) for x in xs],
                color=line.get_color(),
                alpha=0.15,
                linewidth=0,
            )
        axis.set_title(title)
        axis.set_xlabel("labeled chains")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle(
        f"Active-learning simulation: mean over {len(seeds)} seed(s), band = min-max over seeds",
        fontsize=10,
    )
    figure.tight_layout()
    figure.savefig(str(path), dpi=120)
    plt.close(figure)
