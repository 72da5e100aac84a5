"""Active-learning simulation: replay labeled chains as the oracle to compare acquisition
strategies before spending annotator hours (``manage.py simulate_active_learning``).

The protocol, per seed:

1. A held-out part is split off by problem (no problem has chains on both sides, so the
   held-out score is not inflated by near-duplicate solutions), in the seed's own random
   order: each seed holds out different problems, so the result is not one split's luck.
2. A random seed set of ``seed_size`` chains is drawn from the rest (the pool); the split
   and the seed set are the same for every strategy of that seed, so strategies are
   compared on paired runs (``summarize``: per-seed differences with 95% intervals).
3. Round 0 trains on the seed set and evaluates on the held-out part. Then, per round and
   strategy, the current model scores the still-unlabeled pool, ``select_batch`` picks
   ``batch`` chains, their labels are revealed, the PRM is retrained from scratch on all
   labeled chains and evaluated again.
4. The model-free baselines (``baselines``: the outcome-only rule and the step-position
   prior) are fitted on the whole labeled pool, the most any of them could learn from it,
   and scored on the same held-out chains with the same threshold rule.

Cost is counted twice: labeled chains, and labeled steps (the ratings annotators gave;
in first-error labeling, the steps up to the first error), which is what an hour buys.
When the oracle's labels stop at the first error (``stops_at_first_error``), acquisition
counts only the steps that would be rated (``acquisition``).

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
from .baselines import BASELINES, baseline_metrics
from .config import PRMConfig
from .data import ChainExample
from .paired import Interval, interval

BASELINE = "random"
METRICS = ("processbench_f1", "step_auroc", "first_error_accuracy")
# The F1 difference the default number of seeds is sized to resolve: on ProcessBench's
# GSM8K and MATH files (2026-11-25, 25 seeds) the paired F1 differences with random had
# a spread that needs 48 seeds for a 95% half-width of 0.02. Each summary says how many
# its own spread needs.
RESOLVE_F1 = 0.02
DEFAULT_SEEDS = 50


@dataclass(frozen=True)
class SimulationConfig:
    strategies: tuple[str, ...]
    rounds: int
    batch: int
    seeds: tuple[int, ...] = tuple(range(DEFAULT_SEEDS))
    seed_size: int = 20
    heldout_fraction: float = 0.2
    random_fraction: float = 0.2  # the platform's default mix (ScoringRun.random_fraction)

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
    """One evaluation: a metric the held-out chains cannot define is NaN. ``strategy`` is
    an acquisition strategy or a model-free baseline (``BASELINES``, one row per seed at
    the last round, fitted on the whole pool)."""

    strategy: str
    seed: int
    round: int
    labeled_chains: int
    labeled_steps: int
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


def stops_at_first_error(examples: Sequence[ChainExample]) -> bool:
    """Whether the oracle's labels come from first-error labeling: some chain has an
    error and none rates a step after its first one (ProcessBench), so acquisition
    counts only the steps that would be rated.

    >>> stops_at_first_error([ChainExample(1, "p", ("a", "b"), (-1, None))])
    True
    >>> stops_at_first_error([ChainExample(1, "p", ("a", "b"), (-1, 1))])
    False
    """
    errors = False
    for example in examples:
        labels = example.labels or ()
        if -1 in labels:
            errors = True
            if any(rating is not None for rating in labels[labels.index(-1) + 1 :]):
                return False
    return errors


def labeled_steps(example: ChainExample) -> int:
    """The ratings an annotator gave this chain (its labeling cost).

    >>> labeled_steps(ChainExample(1, "p", ("a", "b", "c"), (1, -1, None)))
    2
    """
    return sum(rating is not None for rating in example.labels or ())


def _row(
    strategy: str,
    seed: int,
    round_: int,
    labeled: Sequence[ChainExample],
    metrics: Mapping[str, float],
) -> SimulationRow:
    return SimulationRow(
        strategy=strategy,
        seed=seed,
        round=round_,
        labeled_chains=len(labeled),
        labeled_steps=sum(labeled_steps(example) for example in labeled),
        **{name: float(metrics.get(name, math.nan)) for name in METRICS},
    )


def _baseline_rows(
    seed: int,
    round_: int,
    pool: Sequence[ChainExample],
    heldout: Sequence[ChainExample],
    graded: Mapping[int, bool | None],
) -> list[SimulationRow]:
    """The model-free baselines fitted on the whole pool, scored on ``heldout``."""
    return [
        _row(name, seed, round_, pool, metrics)
        for name, metrics in baseline_metrics(pool, heldout, graded).items()
    ]


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
    chains = oracle_chains(examples)
    if not chains:
        raise ValueError("no chain carries a step label: the simulation needs labeled data")
    needed = sim.seed_size + sim.rounds * sim.batch
    pool, heldout = split_by_problem(chains, sim.heldout_fraction, seed=sim.seeds[0])
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
        for seed in sim.seeds:
            pool, heldout = split_by_problem(chains, sim.heldout_fraction, seed=seed)
            if not heldout or len(pool) < needed:
                raise ValueError(
                    f"seed {seed}: the split by problem leaves {len(pool)} chains for "
                    f"selection, but the run needs {needed}"
                )
            rows.extend(_simulate_seed(sim, prm, seed, pool, heldout, graded, checkpoint, progress))
            rows.extend(_baseline_rows(seed, sim.rounds, pool, heldout, graded))
    return rows


def _simulate_seed(
    sim: SimulationConfig,
    prm: PRMConfig,
    seed: int,
    pool: list[ChainExample],
    heldout: list[ChainExample],
    graded: Mapping[int, bool | None],
    checkpoint: Path,
    progress: Callable[[], None] | None,
) -> list[SimulationRow]:
    """Every strategy's rounds for one seed (its split and seed set)."""
    from .acquisition import select_batch
    from .score import load_prm, score_chains
    from .train import train_prm

    def train(labeled: list[int]) -> dict[str, float]:
        config = replace(prm, seed=seed, heldout_metrics=True)
        result = train_prm(config, [pool[i] for i in labeled], heldout, checkpoint)
        if progress is not None:
            progress()
        return result.metrics

    rows: list[SimulationRow] = []
    first_error_labeling = stops_at_first_error(pool)
    rng = np.random.default_rng(seed)
    seed_set = sorted(int(i) for i in rng.choice(len(pool), sim.seed_size, replace=False))
    # Round 0 is the same model for every strategy of this seed: train it once.
    first_metrics = train(seed_set)
    first_prm = load_prm(checkpoint)
    for strategy in sim.strategies:
        rows.append(_row(strategy, seed, 0, [pool[i] for i in seed_set], first_metrics))
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
                first_error_labeling=first_error_labeling,
                groups=[pool[i].problem.strip() for i in unlabeled],
                rng=strategy_rng,
            )
            labeled.extend(unlabeled[i] for i in picked)
            metrics = train(labeled)
            rows.append(_row(strategy, seed, round_, [pool[i] for i in labeled], metrics))
            if round_ < sim.rounds:
                model = load_prm(checkpoint)
    return rows


@dataclass(frozen=True)
class Reach:
    """Where a strategy first reaches the reference's final score and holds it to the
    last round, judged on the paired interval (not significantly below), with its cost
    (means over seeds)."""

    round: int
    labeled_chains: float
    labeled_steps: float


@dataclass(frozen=True)
class SummaryLine:
    name: str
    is_baseline: bool
    seeds: int
    final: dict[str, float]  # metric -> mean over seeds at the last round
    labeled_chains: float
    labeled_steps: float
    versus: dict[str, Interval]  # metric -> (this - reference) at the last round, by seed
    reach: Reach | None  # strategies only; None: not reached


def _by_seed(rows: Sequence[SimulationRow]) -> dict[tuple[str, int], dict[int, SimulationRow]]:
    table: dict[tuple[str, int], dict[int, SimulationRow]] = defaultdict(dict)
    for row in rows:
        table[(row.strategy, row.seed)][row.round] = row
    return table


def summarize(
    rows: Sequence[SimulationRow], metric: str = "processbench_f1", reference: str = BASELINE
) -> list[SummaryLine]:
    """One line per strategy and baseline: its last round, its paired difference with
    ``reference``'s last round on every metric, and (strategies) the round from which it
    reaches ``reference``'s final ``metric``: the 95% interval of the per-seed difference
    no longer lies below 0, in that round and every later one.

    >>> rows = [SimulationRow(s, seed, r, 10 * (r + 1), 30 * (r + 1), f + seed / 100, .6, .5)
    ...         for s, fs in (("random", (.2, .3, .4)), ("entropy", (.2, .4, .5)))
    ...         for seed in range(4) for r, f in enumerate(fs)]
    >>> [(line.name, str(line.versus["processbench_f1"]), line.reach.labeled_steps)
    ...  for line in summarize(rows, "processbench_f1")]
    [('random', '+0.000 ± 0.000', 90.0), ('entropy', '+0.100 ± 0.000', 60.0)]
    """
    table = _by_seed(rows)
    names = list(dict.fromkeys(row.strategy for row in rows))
    if reference not in names:
        raise ValueError(f"the reference strategy {reference!r} has no rows to compare with")
    seeds = sorted({seed for name, seed in table if name == reference})
    last = max(table[(reference, seeds[0])])
    target = {seed: table[(reference, seed)][last] for seed in seeds}
    lines = []
    for name in names:
        runs = [table[(name, seed)] for seed in seeds if (name, seed) in table]
        ends = [run[max(run)] for run in runs]
        lines.append(
            SummaryLine(
                name=name,
                is_baseline=name in BASELINES,
                seeds=len(runs),
                final={m: _nanmean([getattr(end, m) for end in ends]) for m in METRICS},
                labeled_chains=float(np.mean([end.labeled_chains for end in ends])),
                labeled_steps=float(np.mean([end.labeled_steps for end in ends])),
                versus={
                    m: interval([getattr(end, m) - getattr(target[end.seed], m) for end in ends])
                    for m in METRICS
                },
                reach=None if name in BASELINES else _reach(runs, target, metric),
            )
        )
    return lines


def _reach(
    runs: Sequence[Mapping[int, SimulationRow]],
    target: Mapping[int, SimulationRow],
    metric: str,
) -> Reach | None:
    reached: Reach | None = None
    for round_ in sorted(runs[0], reverse=True):
        at = [run[round_] for run in runs if round_ in run]
        gap = interval([getattr(row, metric) - getattr(target[row.seed], metric) for row in at])
        if math.isnan(gap.mean) or gap.high < 0:
            break
        reached = Reach(
            round=round_,
            labeled_chains=float(np.mean([row.labeled_chains for row in at])),
            labeled_steps=float(np.mean([row.labeled_steps for row in at])),
        )
    return reached


def _nanmean(values: Sequence[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return float(np.mean(kept)) if kept else math.nan


def seeds_to_resolve(rows: Sequence[SimulationRow], effect: float = RESOLVE_F1) -> int | None:
    """Seeds a paired F1 difference of ``effect`` needs at the largest spread this run saw
    between a strategy and the reference at the last round (None with one seed)."""
    from .paired import seeds_needed

    table = _by_seed(rows)
    seeds = sorted({seed for name, seed in table if name == BASELINE})
    if not seeds:
        return None
    last = max(table[(BASELINE, seeds[0])])
    needs = []
    for name in {row.strategy for row in rows} - {BASELINE}:
        diffs = [
            table[(name, seed)][max(table[(name, seed)])].processbench_f1
            - table[(BASELINE, seed)][last].processbench_f1
            for seed in seeds
            if (name, seed) in table
        ]
        needed = seeds_needed(diffs, effect)
        if needed is not None:
            needs.append(needed)
    return max(needs) if needs else None


def summary_table(rows: Sequence[SimulationRow]) -> str:
    """The summary as a fixed-width text table (what the command prints)."""
    lines = summarize(rows)
    seeds = max(line.seeds for line in lines)
    head = (
        f"{'':<27}{'F1':>7}{'AUROC':>7}{'FE acc':>8}{'chains':>8}{'steps':>8}"
        f"  {'ΔF1 vs random':<17}{'ΔAUROC':<17}{'ΔFE acc':<17}steps to random's final F1"
    )
    out = [
        f"held-out metrics at the last round, mean over {seeds} seeds; Δ: paired difference "
        "with random at its last round, 95% interval (holding 0: no difference)",
        head,
    ]
    for line in lines:
        name = f"{line.name} (no model)" if line.is_baseline else line.name
        versus = ["—" if line.name == BASELINE else str(line.versus[m]) for m in METRICS]
        if line.is_baseline:
            reach = "(fitted on the whole pool)"
        elif line.reach is None:
            reach = "not reached"
        else:
            reach = f"{line.reach.labeled_steps:.0f} (round {line.reach.round})"
        f = line.final
        out.append(
            f"{name:<27}{f['processbench_f1']:>7.3f}{f['step_auroc']:>7.3f}"
            f"{f['first_error_accuracy']:>8.3f}{line.labeled_chains:>8.0f}"
            f"{line.labeled_steps:>8.0f}  {versus[0]:<17}{versus[1]:<17}{versus[2]:<17}{reach}"
        )
    needed = seeds_to_resolve(rows)
    if needed is not None:
        out.append(
            f"seeds needed to resolve a {RESOLVE_F1} F1 difference at this run's spread: {needed}"
        )
    return "\n".join(out)


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
    """Three panels, held-out ProcessBench F1, step AUROC and first-error accuracy against
    labeled steps: one line per strategy (mean over seeds, x the mean labeled steps of the
    round) with its 95% interval over seeds as a band; the model-free baselines as
    horizontal lines with theirs."""
    import matplotlib

    matplotlib.use("Agg")  # headless: a worker or CI has no display
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(row.strategy for row in rows))
    seeds = sorted({row.seed for row in rows})
    figure, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    titles = ("held-out ProcessBench F1", "held-out step AUROC", "held-out first-error accuracy")
    for axis, metric, title in zip(axes, METRICS, titles, strict=True):
        rules: dict[float, list[str]] = {}
        for name in names:
            by_round: dict[int, list[SimulationRow]] = defaultdict(list)
            for row in rows:
                if row.strategy == name and not math.isnan(getattr(row, metric)):
                    by_round[row.round].append(row)
            if not by_round:
                continue
            rounds = sorted(by_round)
            spans = [interval([getattr(r, metric) for r in by_round[n]]) for n in rounds]
            xs = [float(np.mean([r.labeled_steps for r in by_round[n]])) for n in rounds]
            low = [span.low if math.isfinite(span.half_width) else span.mean for span in spans]
            high = [span.high if math.isfinite(span.half_width) else span.mean for span in spans]
            if name in BASELINES:
                axis.axhline(spans[-1].mean, linestyle=":", color="grey", linewidth=1)
                axis.axhspan(low[-1], high[-1], color="grey", alpha=0.08, linewidth=0)
                # Rules that score the same (the answer-aware readout makes the position
                # prior's first-error calls the outcome rule's) share one label.
                rules.setdefault(round(spans[-1].mean, 9), []).append(name)
                continue
            (line,) = axis.plot(
                xs,
                [span.mean for span in spans],
                marker="o",
                markersize=3,
                label=name,
                linestyle="--" if name == BASELINE else "-",
            )
            axis.fill_between(xs, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
        for value, same in rules.items():
            axis.annotate(
                f"{' = '.join(same)} (no model)",
                (0.01, value),
                xycoords=("axes fraction", "data"),
                fontsize=7,
                color="dimgrey",
                va="bottom",
            )
        axis.set_title(title)
        axis.set_xlabel("labeled steps")
        axis.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle(
        f"Active-learning simulation: mean over {len(seeds)} seed(s), band = 95% interval",
        fontsize=10,
    )
    figure.tight_layout()
    figure.savefig(str(path), dpi=120)
    plt.close(figure)
