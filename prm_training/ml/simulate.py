"""Active-learning simulation: replay labeled chains as the oracle to compare acquisition
strategies before spending annotator hours (``manage.py simulate_active_learning``).

The protocol, per seed:

1. A held-out part is split off by problem (no problem has chains on both sides, so the
   held-out score is not inflated by near-duplicate solutions), in the seed's own random
   order: each seed holds out different problems, so the result is not one split's luck.
2. A random seed set of ``seed_size`` chains is drawn from the rest (the pool); the split
   and the seed set are the same for every strategy of that seed, so strategies are
   compared on paired runs.
3. Round 0 trains on the seed set and evaluates on the held-out part. Then, per round and
   strategy, the current model scores the still-unlabeled pool, ``select_batch`` picks
   ``batch`` chains, their labels are revealed, the PRM is retrained from scratch on all
   labeled chains and evaluated again.
4. The baselines (``baselines``: the outcome-only rule, the step-position prior and the
   text-blind head) are fitted on the whole labeled pool, the most any of them could
   learn from it, and scored on the same held-out chains with their own readouts.

Cost is counted twice: labeled chains, and labeled steps (the ratings annotators gave;
in first-error labeling, the steps up to the first error), which is what an hour buys.
Strategies are compared with random at equal labeled steps (``at_equal_steps``: the
curves interpolated in steps), not at equal chains: a model-driven strategy that picks
chains with early errors labels fewer steps per chain, and a comparison by round would
credit it with labels it did not pay for. When the oracle's labels stop at the first
error (``stops_at_first_error``), acquisition counts only the steps that would be rated
(``acquisition``).

Every interval is the corrected resampled t of ``paired`` (the seeds' held-out parts
overlap); ``simulation_report.summarize`` says per strategy whether it saves labeled steps
(``SummaryLine.saves_steps``), the rule 'auto' applies on a project's own labels.

Machine arms (``MachineArm``, issue 23: what machine labels are worth): each round takes
the chains random takes (the same random stream over the same labeled set, so the arm
and random label the same chains), asks a machine source for each chain's labels, and
accepts them where the source's confidence reaches the arm's threshold; a person (the
oracle) labels the rest. The PRM is trained on both. ``labeled_steps`` then counts only
the steps people rated, so the comparison with random at equal labeled steps is at
equal human cost; the rows also count the chains accepted from the machine and how many
of them (and of their steps) disagree with the oracle. The source is the PRM of the
round (its first-error call from the checkpoint's readout, its confidence the
probability the PRM gives that call), available on any data, or labels stored on a
project by a named source (``machine_labels``: source -> chain id -> labels and
confidence, from rollouts or a judge).

In ``frozen_head`` mode the backbone runs once per chain (the feature cache), so a round
costs a head training and two cache look-ups; the first pass over the chains is the cost.
Pure: no Django, takes ``ChainExample``s, returns rows.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from .acquisition import STRATEGIES
from .baselines import baseline_figures
from .config import PRMConfig
from .data import ChainExample
from .machine_labeler import (
    PRM_SOURCE,
    MachineArm,
    MachineLabels,
    MachineTally,
    prm_machine_labels,
)
from .oracle import oracle_chains, split_by_problem, stops_at_first_error

BASELINE = "random"
METRICS = ("processbench_f1", "mean_subset_f1", "step_auroc", "first_error_accuracy")
# What a strategy must not lose to random on at any round, at equal labeled steps, and
# (the first) beat it on at the last, for 'auto' to leave random (``saves_steps``).
DECISION_METRICS = ("processbench_f1", "step_auroc", "first_error_accuracy")
# The F1 difference a summary says how many seeds it would take to resolve. With the
# correction for overlapping splits the half-width falls as sqrt(1/J + 0.25), so past
# about 20 seeds only more chains narrow it: 20 seeds are within 10% of 50's width
# (t * sqrt(1/J + 0.25): 1.15 against 1.05) at two fifths of the time.
RESOLVE_F1 = 0.02
DEFAULT_SEEDS = 20


@dataclass(frozen=True)
class SimulationConfig:
    strategies: tuple[str, ...]
    rounds: int
    batch: int
    seeds: tuple[int, ...] = tuple(range(DEFAULT_SEEDS))
    seed_size: int = 20
    heldout_fraction: float = 0.2
    random_fraction: float = 0.2  # the platform's default mix (ScoringRun.random_fraction)
    machine_arms: tuple[MachineArm, ...] = ()

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
        if self.machine_arms and BASELINE not in self.strategies:
            raise ValueError("machine arms are compared with random: list random too")
        if len({arm.name for arm in self.machine_arms}) != len(self.machine_arms):
            raise ValueError("a machine arm is listed twice")


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
    # ProcessBench's own figure: F1 per subset (``ChainExample.subset``) and their mean.
    mean_subset_f1: float = math.nan
    # Machine arms only: chains whose labels were accepted from the machine (not counted
    # in labeled_steps, which holds the steps people rated), those whose first error the
    # oracle places elsewhere, and the same in steps (where both give a label).
    machine_chains: int = 0
    machine_chain_errors: int = 0
    machine_steps: int = 0
    machine_step_errors: int = 0
    subset_f1: tuple[tuple[str, float], ...] = ()


ROW_FIELDS = tuple(f.name for f in fields(SimulationRow) if f.name != "subset_f1")


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
        processbench_f1=float(metrics.get("processbench_f1", math.nan)),
        mean_subset_f1=float(metrics.get("mean_subset_f1", math.nan)),
        step_auroc=float(metrics.get("step_auroc", math.nan)),
        first_error_accuracy=float(metrics.get("first_error_accuracy", math.nan)),
        subset_f1=tuple(
            sorted(
                (key.removeprefix("subset_f1:"), float(value))
                for key, value in metrics.items()
                if key.startswith("subset_f1:")
            )
        ),
    )


def _baseline_rows(
    seed: int,
    round_: int,
    pool: Sequence[ChainExample],
    heldout: Sequence[ChainExample],
    graded: Mapping[int, bool | None],
    prm: PRMConfig,
) -> list[SimulationRow]:
    """The baselines (the two rules and the text-blind head) fitted on the whole pool,
    scored on ``heldout``."""
    from .train import fit_baselines

    fitted = fit_baselines(replace(prm, seed=seed), list(pool), answers_correct=graded)
    return [
        _row(name, seed, round_, pool, metrics)
        for name, metrics in baseline_figures(fitted, heldout, graded).items()
    ]


def simulate(
    examples: Sequence[ChainExample],
    sim: SimulationConfig,
    prm: PRMConfig,
    *,
    answers_correct: Mapping[int, bool | None] | None = None,
    machine_labels: Mapping[str, Mapping[int, MachineLabels]] | None = None,
    work_dir: str | Path | None = None,
    progress: Callable[[], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> list[SimulationRow]:
    """Runs the protocol of the module docstring; rows for round 0..``rounds`` of every
    (strategy or machine arm, seed). ``answers_correct`` maps chain_id to its final
    answer's grade (for ``convincing_wrong`` and the PRM's readout; a missing id is
    ungraded); ``machine_labels`` holds the stored sources the machine arms name (a chain
    a source lacks goes to people). ``progress`` is called after each
    training (it may raise ``progress.RunCancelled`` to stop there); ``should_stop`` is
    handed to every training (``train_prm``), which stops between two batches once it is
    true. Raises ValueError when the chains cannot support the requested run."""
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
    missing = {arm.source for arm in sim.machine_arms} - {PRM_SOURCE, *(machine_labels or {})}
    if missing:
        raise ValueError(f"no stored machine labels of {', '.join(sorted(missing))}")
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
            rows.extend(
                _simulate_seed(
                    sim,
                    prm,
                    seed,
                    (pool, heldout),
                    graded,
                    machine_labels or {},
                    checkpoint,
                    (progress, should_stop),
                )
            )
            rows.extend(_baseline_rows(seed, sim.rounds, pool, heldout, graded, prm))
    return rows


def _simulate_seed(
    sim: SimulationConfig,
    prm: PRMConfig,
    seed: int,
    split: tuple[list[ChainExample], list[ChainExample]],
    graded: Mapping[int, bool | None],
    stored: Mapping[str, Mapping[int, MachineLabels]],
    checkpoint: Path,
    reports: tuple[Callable[[], None] | None, Callable[[], bool] | None],
) -> list[SimulationRow]:
    """Every strategy's and machine arm's rounds for one seed (``split``: its pool and
    held-out chains; the seed set); ``reports``: the ``progress`` and ``should_stop`` of
    ``simulate``."""
    from .acquisition import select_batch
    from .checkpoint import load_prm
    from .launch import train_prm
    from .score import score_chains

    pool, heldout = split
    progress, should_stop = reports

    def train(
        labeled: list[int], relabeled: Mapping[int, ChainExample] | None = None
    ) -> dict[str, float]:
        config = replace(prm, seed=seed, heldout_metrics=True)
        result = train_prm(
            config,
            [(relabeled or {}).get(i, pool[i]) for i in labeled],
            heldout,
            checkpoint,
            baselines=False,
            should_stop=should_stop,
        )
        if progress is not None:
            progress()
        return result.metrics

    rows: list[SimulationRow] = []
    rng = np.random.default_rng(seed)
    seed_set = sorted(int(i) for i in rng.choice(len(pool), sim.seed_size, replace=False))
    # Round 0 is the same model for every strategy of this seed: train it once.
    first_metrics = train(seed_set)
    first_prm = load_prm(checkpoint)
    calls = (train, lambda: load_prm(checkpoint), score_chains, select_batch)
    for strategy in sim.strategies:
        rows.extend(
            _strategy_rounds(
                strategy, sim, seed, pool, (seed_set, first_prm, first_metrics), graded, calls
            )
        )
    for arm in sim.machine_arms:
        arm_rows = _machine_arm_rounds(
            arm,
            sim,
            seed,
            pool,
            (seed_set, first_prm, first_metrics),
            graded,
            stored,
            calls,
        )
        rows.extend(arm_rows)
    return rows


def _round_picks(
    strategy: str,
    model: Any,
    pool: list[ChainExample],
    labeled: list[int],
    sim: SimulationConfig,
    graded: Mapping[int, bool | None],
    rng: np.random.Generator,
    calls: tuple[Callable[..., Any], Callable[..., Any]],
) -> tuple[list[int], list[Any], list[int]]:
    """One round's choice: (the pool's unlabeled indices, the model's scores of them,
    the positions ``strategy`` picks among them). ``calls``: ``score_chains`` and
    ``select_batch``."""
    score, select = calls
    taken = set(labeled)
    unlabeled = [i for i in range(len(pool)) if i not in taken]
    # The model sees texts only: labels stay with the oracle until chosen.
    scores = list(score(model, [replace(pool[i], labels=None) for i in unlabeled]))
    picked = select(
        strategy,
        scores,
        sim.batch,
        random_fraction=sim.random_fraction,
        answers_correct=[graded.get(pool[i].chain_id) for i in unlabeled],
        first_error_labeling=stops_at_first_error(pool),
        groups=[pool[i].problem.strip() for i in unlabeled],
        rng=rng,
    )
    return unlabeled, scores, picked


def _strategy_rounds(
    strategy: str,
    sim: SimulationConfig,
    seed: int,
    pool: list[ChainExample],
    start: tuple[list[int], Any, Mapping[str, float]],
    graded: Mapping[int, bool | None],
    calls: tuple[Callable[..., Any], Callable[[], Any], Callable[..., Any], Callable[..., Any]],
) -> list[SimulationRow]:
    """One strategy's rounds for one seed: the current model scores the unlabeled pool,
    the strategy picks a batch, the oracle labels it, the PRM is retrained. ``start``:
    the seed set, round 0's model and metrics; ``calls``: train, the checkpoint's loader,
    ``score_chains`` and ``select_batch``."""
    train, load, score, select = calls
    seed_set, model, first_metrics = start
    rows = [_row(strategy, seed, 0, [pool[i] for i in seed_set], first_metrics)]
    # Each strategy draws its own random stream, independent of list order.
    strategy_rng = np.random.default_rng([seed, STRATEGIES.index(strategy)])
    labeled = list(seed_set)
    for round_ in range(1, sim.rounds + 1):
        unlabeled, _, picked = _round_picks(
            strategy, model, pool, labeled, sim, graded, strategy_rng, (score, select)
        )
        labeled.extend(unlabeled[i] for i in picked)
        metrics = train(labeled)
        rows.append(_row(strategy, seed, round_, [pool[i] for i in labeled], metrics))
        if round_ < sim.rounds:
            model = load()
    return rows


def _machine_arm_rounds(
    arm: MachineArm,
    sim: SimulationConfig,
    seed: int,
    pool: list[ChainExample],
    start: tuple[list[int], Any, Mapping[str, float]],
    graded: Mapping[int, bool | None],
    stored: Mapping[str, Mapping[int, MachineLabels]],
    calls: tuple[Callable[..., Any], Callable[[], Any], Callable[..., Any], Callable[..., Any]],
) -> list[SimulationRow]:
    """One machine arm's rounds for one seed (module docstring): random's picks, the
    machine's labels accepted at ``arm.threshold``, people for the rest. ``start``: the
    seed set (labeled by people), round 0's model and metrics; ``calls``: train, the
    checkpoint's loader, ``score_chains`` and ``select_batch``."""
    train, load, score, select = calls
    seed_set, model, first_metrics = start
    rng = np.random.default_rng([seed, STRATEGIES.index(BASELINE)])  # random's own stream
    labeled, human = list(seed_set), set(seed_set)
    relabeled: dict[int, ChainExample] = {}
    tally = MachineTally()
    rows = [_row(arm.name, seed, 0, [pool[i] for i in seed_set], first_metrics)]
    for round_ in range(1, sim.rounds + 1):
        unlabeled, scores, picked = _round_picks(
            BASELINE, model, pool, labeled, sim, graded, rng, (score, select)
        )
        for position in picked:
            index = unlabeled[position]
            example = pool[index]
            answer: MachineLabels | None
            if arm.source == PRM_SOURCE:
                answer = prm_machine_labels(
                    scores[position].step_probs, model.readout, graded.get(example.chain_id)
                )
            else:
                answer = stored[arm.source].get(example.chain_id)
            if answer is not None and answer[1] >= arm.threshold:
                relabeled[index] = replace(example, labels=answer[0])
                tally.add(answer[0], example.labels)
            else:
                human.add(index)
            labeled.append(index)
        metrics = train(labeled, relabeled)
        row = _row(arm.name, seed, round_, [pool[i] for i in labeled], metrics)
        rows.append(
            replace(
                row,
                labeled_steps=sum(labeled_steps(pool[i]) for i in human),
                machine_chains=tally.chains,
                machine_chain_errors=tally.chain_errors,
                machine_steps=tally.steps,
                machine_step_errors=tally.step_errors,
            )
        )
        if round_ < sim.rounds:
            model = load()
    return rows
