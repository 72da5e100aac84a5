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
overlap); ``summarize`` says per strategy whether it saves labeled steps
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
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from .acquisition import STRATEGIES
from .baselines import BASELINES, baseline_figures
from .config import PRMConfig
from .data import ChainExample
from .paired import HELDOUT_FRACTION, Interval, resampled_interval
from .readout import Readout, first_error_distribution, labeled_first_error

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


PRM_SOURCE = "prm"  # the round's own PRM; any other source is read from stored labels
MACHINE_PREFIX = "machine_"


@dataclass(frozen=True)
class MachineArm:
    """Accept a machine source's labels on a chain where its confidence is at least
    ``threshold``; people label the rest (module docstring). ``source``: ``PRM_SOURCE``
    or the name of a stored source (``simulate``'s ``machine_labels``)."""

    source: str
    threshold: float

    def __post_init__(self) -> None:
        if not self.source.isidentifier():
            raise ValueError(f"a machine source is a name, not {self.source!r}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError("a machine arm's threshold must be within [0, 1]")

    @property
    def name(self) -> str:
        """The arm's name in rows and tables.

        >>> MachineArm("prm", 0.9).name
        'machine_prm@0.9'
        """
        return f"{MACHINE_PREFIX}{self.source}@{self.threshold:g}"


# A machine source's answer for one chain: its labels (None where it says nothing) and
# its confidence in them.
MachineLabels = tuple[tuple[int | None, ...], float]


def prm_machine_labels(
    step_probs: Sequence[float], readout: Readout, answer_correct: bool | None
) -> MachineLabels:
    """The PRM as a labeler: its first-error call through ``readout`` (steps before it
    +1, it -1, the rest unlabeled, as first-error labeling leaves them; every step +1 when
    it calls no error), with the probability it gives that call. Where the readout knows
    the answer is wrong (so that an error exists), the probability is conditional on one.

    >>> labels, confidence = prm_machine_labels([0.9, 0.2, 0.5], Readout(0.5), None)
    >>> labels, round(confidence, 3)
    ((1, -1, None), 0.72)
    >>> prm_machine_labels([0.99, 0.98], Readout(0.5), None)[0]
    (1, 1)
    """
    first = readout.first_error(step_probs, answer_correct)
    distribution = first_error_distribution(step_probs)
    confidence = float(distribution[first] if first >= 0 else distribution[-1])
    if first >= 0 and answer_correct is False and readout.threshold_right is not None:
        confidence /= max(1.0 - float(distribution[-1]), 1e-12)
    labels = tuple(
        1 if first == -1 or index < first else (-1 if index == first else None)
        for index in range(len(step_probs))
    )
    return labels, min(confidence, 1.0)


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
    from .launch import train_prm
    from .score import load_prm, score_chains

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
    for arm in sim.machine_arms:
        arm_rows = _machine_arm_rounds(
            arm,
            sim,
            seed,
            pool,
            (seed_set, first_prm, first_metrics),
            graded,
            stored,
            (train, lambda: load_prm(checkpoint), score_chains, select_batch),
        )
        rows.extend(arm_rows)
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
    first_error_labeling = stops_at_first_error(pool)
    labeled, human = list(seed_set), set(seed_set)
    relabeled: dict[int, ChainExample] = {}
    tally = _MachineTally()
    rows = [_row(arm.name, seed, 0, [pool[i] for i in seed_set], first_metrics)]
    for round_ in range(1, sim.rounds + 1):
        taken = set(labeled)
        unlabeled = [i for i in range(len(pool)) if i not in taken]
        scores = list(score(model, [replace(pool[i], labels=None) for i in unlabeled]))
        picked = select(
            BASELINE,
            scores,
            sim.batch,
            random_fraction=sim.random_fraction,
            answers_correct=[graded.get(pool[i].chain_id) for i in unlabeled],
            first_error_labeling=first_error_labeling,
            groups=[pool[i].problem.strip() for i in unlabeled],
            rng=rng,
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


@dataclass
class _MachineTally:
    """What a machine arm accepted so far and how much of it the oracle disputes."""

    chains: int = 0
    chain_errors: int = 0
    steps: int = 0
    step_errors: int = 0

    def add(self, machine: Sequence[int | None], oracle: Sequence[int | None] | None) -> None:
        """Counts one accepted chain: its first error against the oracle's (where the
        oracle's labels settle it), and its steps where both give a label.

        >>> tally = _MachineTally()
        >>> tally.add((1, -1, None), (1, 1, -1)); tally.add((1, 1), (1, 1))
        >>> tally.chains, tally.chain_errors, tally.steps, tally.step_errors
        (2, 1, 4, 1)
        """
        self.chains += 1
        truth = labeled_first_error(oracle)
        if truth is not None and truth != labeled_first_error(machine):
            self.chain_errors += 1
        for ours, theirs in zip(machine, oracle or (), strict=False):
            if ours is not None and theirs is not None:
                self.steps += 1
                self.step_errors += int(ours != theirs)


@dataclass(frozen=True)
class Reach:
    """Where a strategy's mean curve (over seeds) first reaches the reference's final mean
    ``metric`` and stays there, interpolated in labeled steps: a point estimate of its
    cost. Whether the saving is real is ``SummaryLine.saves_steps``'s question."""

    round: int
    labeled_chains: float
    labeled_steps: float


@dataclass
class SummaryLine:
    """One strategy or baseline. ``versus``: a strategy's paired difference with random at
    equal labeled steps at its last round (random's curve interpolated at the strategy's
    steps, both capped at random's last), a baseline's with random's last round; corrected
    95% intervals (``paired.resampled_interval``). ``below``: the rounds at which a
    strategy's interval at equal steps lies under 0, per metric. ``saves_steps``: a
    strategy that is not below random at any round on any of ``DECISION_METRICS`` and above
    it on F1 at its last (None for random and the baselines): the one rule by which the
    summary says a strategy saves labeled steps and 'auto' leaves random."""

    name: str
    is_baseline: bool
    seeds: int
    final: dict[str, float]  # metric -> mean over seeds at the last round
    labeled_chains: float
    labeled_steps: float
    versus: dict[str, Interval]
    reach: Reach | None  # strategies only; None: not reached
    below: dict[str, tuple[int, ...]] = field(default_factory=dict)
    saves_steps: bool | None = None
    final_subsets: dict[str, float] = field(default_factory=dict)  # subset -> mean F1
    is_machine_arm: bool = False  # a machine arm (labeled_steps: the steps people rated)


def _by_seed(rows: Sequence[SimulationRow]) -> dict[tuple[str, int], dict[int, SimulationRow]]:
    table: dict[tuple[str, int], dict[int, SimulationRow]] = defaultdict(dict)
    for row in rows:
        table[(row.strategy, row.seed)][row.round] = row
    return table


def at_equal_steps(
    run: Mapping[int, SimulationRow], reference: Mapping[int, SimulationRow], metric: str
) -> dict[int, float]:
    """round -> ``run``'s ``metric`` minus ``reference``'s at the same labeled steps, for
    every round of ``run`` after the first: both curves interpolated linearly in labeled
    steps at the run's steps of that round, capped at the reference's last (so a run that
    labeled more steps than the reference is compared where the reference ends).

    >>> row = lambda r, steps, f1: SimulationRow("s", 0, r, 10 * r, steps, f1, 0.5, 0.5)
    >>> random = {0: row(0, 10, 0.1), 1: row(1, 30, 0.3), 2: row(2, 50, 0.5)}
    >>> cheap = {0: row(0, 10, 0.1), 1: row(1, 20, 0.25), 2: row(2, 30, 0.35)}
    >>> {r: round(d, 3) for r, d in at_equal_steps(cheap, random, "processbench_f1").items()}
    {1: 0.05, 2: 0.05}
    """
    ref_steps = np.asarray([reference[r].labeled_steps for r in sorted(reference)], dtype=float)
    ref_values = np.asarray([getattr(reference[r], metric) for r in sorted(reference)])
    steps = np.asarray([run[r].labeled_steps for r in sorted(run)], dtype=float)
    values = np.asarray([getattr(run[r], metric) for r in sorted(run)])
    out: dict[int, float] = {}
    for round_ in sorted(run)[1:]:
        budget = min(float(run[round_].labeled_steps), float(ref_steps[-1]))
        ours = float(np.interp(budget, steps, values))
        theirs = float(np.interp(budget, ref_steps, ref_values))
        out[round_] = ours - theirs
    return out


def summarize(
    rows: Sequence[SimulationRow],
    metric: str = "processbench_f1",
    reference: str = BASELINE,
    *,
    heldout_fraction: float = HELDOUT_FRACTION,
) -> list[SummaryLine]:
    """One line per strategy and baseline (``SummaryLine``), compared with ``reference``
    at equal labeled steps, every interval corrected for the seeds' overlapping splits
    (each held out ``heldout_fraction`` of the chains).

    >>> rows = [SimulationRow(s, seed, r, 10 * (r + 1), 30 * (r + 1), f + seed / 100, .6, .5)
    ...         for s, fs in (("random", (.2, .3, .4)), ("entropy", (.2, .4, .5)))
    ...         for seed in range(4) for r, f in enumerate(fs)]
    >>> [(line.name, str(line.versus["processbench_f1"]), line.saves_steps,
    ...   round(line.reach.labeled_steps)) for line in summarize(rows)]
    [('random', '+0.000 ± 0.000', None, 90), ('entropy', '+0.100 ± 0.000', True, 60)]
    """
    table = _by_seed(rows)
    names = list(dict.fromkeys(row.strategy for row in rows))
    if reference not in names:
        raise ValueError(f"the reference strategy {reference!r} has no rows to compare with")
    seeds = sorted({seed for name, seed in table if name == reference})
    last = max(table[(reference, seeds[0])])
    references = {seed: table[(reference, seed)] for seed in seeds}
    lines = []
    for name in names:
        runs = {seed: table[(name, seed)] for seed in seeds if (name, seed) in table}
        ends = [run[max(run)] for run in runs.values()]
        baseline = name in BASELINES
        line = SummaryLine(
            name=name,
            is_baseline=baseline,
            seeds=len(runs),
            final={m: _nanmean([getattr(end, m) for end in ends]) for m in METRICS},
            labeled_chains=float(np.mean([end.labeled_chains for end in ends])),
            labeled_steps=float(np.mean([end.labeled_steps for end in ends])),
            versus={},
            reach=None if baseline else _reach(list(runs.values()), references, last, metric),
            final_subsets=_subset_means(ends),
            is_machine_arm=name.startswith(MACHINE_PREFIX),
        )
        if baseline:
            for m in METRICS:
                line.versus[m] = resampled_interval(
                    [getattr(end, m) - getattr(references[end.seed][last], m) for end in ends],
                    heldout_fraction=heldout_fraction,
                )
        else:
            _compare_at_equal_steps(line, runs, references, heldout_fraction, name == reference)
        lines.append(line)
    return lines


def _compare_at_equal_steps(
    line: SummaryLine,
    runs: Mapping[int, Mapping[int, SimulationRow]],
    references: Mapping[int, Mapping[int, SimulationRow]],
    heldout_fraction: float,
    is_reference: bool,
) -> None:
    """Fills ``line``'s ``versus`` (the last round), ``below`` and ``saves_steps``."""
    for m in METRICS:
        gaps: dict[int, list[float]] = defaultdict(list)
        for seed, run in runs.items():
            for round_, gap in at_equal_steps(run, references[seed], m).items():
                gaps[round_].append(gap)
        intervals = {
            r: resampled_interval(values, heldout_fraction=heldout_fraction)
            for r, values in sorted(gaps.items())
        }
        if intervals:
            line.versus[m] = intervals[max(intervals)]
        line.below[m] = tuple(r for r, gap in intervals.items() if gap.high < 0)
    if is_reference:
        return
    f1 = line.versus.get("processbench_f1")
    line.saves_steps = saves_steps(f1.low if f1 is not None else None, line.below)


def saves_steps(f1_low: float | None, below: Mapping[str, Sequence[int]]) -> bool:
    """The rule by which a strategy saves labeled steps over random, and by which 'auto'
    leaves random: its F1 at equal steps is above random's at its last round (the
    corrected interval's ``f1_low`` above 0) and it is below random at no round on any of
    ``DECISION_METRICS`` (``below``: metric -> the rounds where its interval lies under 0;
    a metric missing is not known to be safe).

    >>> saves_steps(0.01, {m: () for m in DECISION_METRICS})
    True
    >>> saves_steps(0.01, {"processbench_f1": (2,), "step_auroc": (), "first_error_accuracy": ()})
    False
    >>> saves_steps(0.01, {"processbench_f1": ()})
    False
    """
    return (
        f1_low is not None
        and f1_low > 0
        and all(m in below and not below[m] for m in DECISION_METRICS)
    )


def _subset_means(ends: Sequence[SimulationRow]) -> dict[str, float]:
    values: dict[str, list[float]] = defaultdict(list)
    for end in ends:
        for subset, value in end.subset_f1:
            values[subset].append(value)
    return {subset: _nanmean(vals) for subset, vals in sorted(values.items())}


def _reach(
    runs: Sequence[Mapping[int, SimulationRow]],
    references: Mapping[int, Mapping[int, SimulationRow]],
    last: int,
    metric: str,
) -> Reach | None:
    """The ``Reach`` of the mean curve of ``runs`` to the references' final mean."""
    target = _nanmean([getattr(ref[last], metric) for ref in references.values()])
    rounds = sorted(runs[0])
    means = [_nanmean([getattr(run[r], metric) for run in runs if r in run]) for r in rounds]
    steps = [float(np.mean([run[r].labeled_steps for run in runs if r in run])) for r in rounds]
    chains = [float(np.mean([run[r].labeled_chains for run in runs if r in run])) for r in rounds]
    below = [i for i, value in enumerate(means) if not value >= target]
    first = (below[-1] + 1) if below else 0  # from here on the curve stays at or above
    if first >= len(rounds):
        return None
    if first == 0:
        return Reach(rounds[0], chains[0], steps[0])
    # Linear between the last round below and the first at or above it.
    before, after = means[first - 1], means[first]
    share = (target - before) / (after - before) if after != before else 1.0
    return Reach(
        rounds[first],
        chains[first - 1] + share * (chains[first] - chains[first - 1]),
        steps[first - 1] + share * (steps[first] - steps[first - 1]),
    )


def _nanmean(values: Sequence[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return float(np.mean(kept)) if kept else math.nan


def seeds_to_resolve(
    rows: Sequence[SimulationRow],
    effect: float = RESOLVE_F1,
    *,
    heldout_fraction: float = HELDOUT_FRACTION,
) -> tuple[int | None, bool]:
    """(seeds a paired F1 difference of ``effect`` at equal steps needs at the largest
    spread this run saw between a strategy and the reference at the last round, whether
    any strategy was compared): None when no number of seeds gets there (the corrected
    interval's floor: only more chains resolve it)."""
    from .paired import seeds_needed

    table = _by_seed(rows)
    seeds = sorted({seed for name, seed in table if name == BASELINE})
    if not seeds:
        return None, False
    needs: list[int | None] = []
    for name in {row.strategy for row in rows} - {BASELINE, *BASELINES}:
        diffs = []
        for seed in seeds:
            if (name, seed) in table:
                gaps = at_equal_steps(
                    table[(name, seed)], table[(BASELINE, seed)], "processbench_f1"
                )
                if gaps:
                    diffs.append(gaps[max(gaps)])
        if len(diffs) >= 2:
            needs.append(seeds_needed(diffs, effect, heldout_fraction=heldout_fraction))
    if not needs:
        return None, False
    if any(need is None for need in needs):
        return None, True
    return max(n for n in needs if n is not None), True


def _reach_text(line: SummaryLine) -> str:
    if line.is_baseline:
        return "(fitted on the whole pool)"
    if line.reach is None:
        return "not reached"
    return f"{line.reach.labeled_steps:.0f}"


def summary_table(
    rows: Sequence[SimulationRow], *, heldout_fraction: float = HELDOUT_FRACTION
) -> str:
    """The summary as a fixed-width text table (what the command prints), the per-subset
    F1 at the last round, and a sentence on which strategy, if any, saves labeled steps."""
    lines = summarize(rows, heldout_fraction=heldout_fraction)
    seeds = max(line.seeds for line in lines)
    head = (
        f"{'':<27}{'F1':>7}{'sub F1':>7}{'AUROC':>7}{'FE acc':>8}{'chains':>8}{'steps':>8}"
        f"  {'ΔF1':<17}{'ΔAUROC':<17}{'ΔFE acc':<17}{'below random at rounds':<24}"
        "steps to random's F1"
    )
    out = [
        f"held-out figures at the last round, mean over {seeds} seeds (sub F1: ProcessBench's "
        "mean of per-subset F1); Δ: paired difference with random at equal labeled steps "
        "(baselines: with random's last round), 95% interval corrected for the seeds' "
        f"overlapping splits ({heldout_fraction:.0%} held out; holding 0: no difference)",
        head,
    ]
    for line in lines:
        name = (
            f"{line.name} (no model)"
            if line.is_baseline and line.name != "text_blind"
            else line.name
        )
        if line.name == "text_blind":
            name = "text_blind (no step text)"
        versus = [
            "—" if line.name == BASELINE or m not in line.versus else str(line.versus[m])
            for m in DECISION_METRICS
        ]
        below = "—"
        if not line.is_baseline and line.name != BASELINE:
            below = (
                "; ".join(
                    f"{SHORT[m]} {','.join(map(str, rounds))}"
                    for m, rounds in line.below.items()
                    if rounds and m in DECISION_METRICS
                )
                or "none"
            )
        f = line.final
        out.append(
            f"{name:<27}{f['processbench_f1']:>7.3f}{f['mean_subset_f1']:>7.3f}"
            f"{f['step_auroc']:>7.3f}{f['first_error_accuracy']:>8.3f}{line.labeled_chains:>8.0f}"
            f"{line.labeled_steps:>8.0f}  {versus[0]:<17}{versus[1]:<17}{versus[2]:<17}"
            f"{below:<24}{_reach_text(line)}"
        )
    out.extend(_subset_table(lines))
    out.extend(machine_table(rows, heldout_fraction=heldout_fraction))
    out.append(_savings_sentence(lines))
    needed, compared = seeds_to_resolve(rows, heldout_fraction=heldout_fraction)
    if compared:
        out.append(
            f"seeds needed to resolve a {RESOLVE_F1} F1 difference at this run's spread: "
            + (
                str(needed)
                if needed is not None
                else "none suffice (the held-out set is too small: only more chains resolve it)"
            )
        )
    return "\n".join(out)


SHORT = {
    "processbench_f1": "F1",
    "step_auroc": "AUROC",
    "first_error_accuracy": "FE acc",
    "mean_subset_f1": "sub F1",
}


def _subset_table(lines: Sequence[SummaryLine]) -> list[str]:
    """Per-subset F1 at the last round, one column a subset (nothing with one subset)."""
    subsets = sorted({subset for line in lines for subset in line.final_subsets})
    if len(subsets) < 2:
        return []
    out = ["F1 per subset at the last round: " + ", ".join(subsets)]
    for line in lines:
        cells = "".join(f"{line.final_subsets.get(s, math.nan):>9.3f}" for s in subsets)
        out.append(f"  {line.name:<25}{cells}")
    return out


def machine_table(
    rows: Sequence[SimulationRow], *, heldout_fraction: float = HELDOUT_FRACTION
) -> list[str]:
    """What each machine arm's labels were worth at the last round: the steps people
    rated, the share of chains taken from the machine, how often the oracle places those
    chains' first error elsewhere and disagrees on their steps, and the held-out F1's
    paired difference with all-human labeling of the same chains (random at the same
    round); corrected 95% intervals over seeds. Nothing without machine arms."""
    table = _by_seed(rows)
    arms = [n for n in dict.fromkeys(r.strategy for r in rows) if n.startswith(MACHINE_PREFIX)]
    if not arms:
        return []
    out = [
        "machine arms at the last round (random picks, machine labels accepted at the "
        "threshold, people for the rest); Δ vs all-human labeling of the same chains",
        f"  {'':<25}{'human steps':>12}{'  random':>9}  {'machine chains':<16}"
        f"{'chain error rate':<18}{'step error rate':<18}{'ΔF1 same chains':<17}",
    ]
    for arm in arms:
        ends = []
        for (name, seed), by_round in table.items():
            if name == arm and (BASELINE, seed) in table:
                last = max(by_round)
                ends.append((by_round[last], table[(BASELINE, seed)][last]))
        if not ends:
            continue

        share = np.mean([end.machine_chains / max(end.labeled_chains, 1) for end, _ in ends])
        gap = resampled_interval(
            [end.processbench_f1 - ref.processbench_f1 for end, ref in ends],
            heldout_fraction=heldout_fraction,
        )
        chain_errors = _rate(ends, "machine_chain_errors", "machine_chains", heldout_fraction)
        step_errors = _rate(ends, "machine_step_errors", "machine_steps", heldout_fraction)
        out.append(
            f"  {arm:<25}{np.mean([e.labeled_steps for e, _ in ends]):>12.0f}"
            f"{np.mean([r.labeled_steps for _, r in ends]):>9.0f}  {share:<16.1%}"
            f"{chain_errors:<18}{step_errors:<18}{gap!s:<17}"
        )
    return out


def _rate(
    ends: Sequence[tuple[SimulationRow, SimulationRow]],
    errors: str,
    total: str,
    heldout_fraction: float,
) -> str:
    """The mean over seeds of ``errors`` / ``total`` at the last round, with its corrected
    interval ("n/a" where no seed accepted anything)."""
    values = [
        getattr(end, errors) / getattr(end, total) for end, _ in ends if getattr(end, total) > 0
    ]
    if not values:
        return "n/a"
    span = resampled_interval(values, heldout_fraction=heldout_fraction)
    if not math.isfinite(span.half_width):
        return f"{span.mean:.3f}"
    return f"{span.mean:.3f} ± {span.half_width:.3f}"


def _savings_sentence(lines: Sequence[SummaryLine]) -> str:
    """Which strategy, if any, saves labeled steps (``SummaryLine.saves_steps``)."""
    strategies = [
        line for line in lines if line.saves_steps is not None and not line.is_machine_arm
    ]
    saving = [line for line in strategies if line.saves_steps]
    if not strategies:
        return "no strategy but random was simulated"
    if not saving:
        return (
            "at equal labeled steps no strategy saves steps over random: none is above it on "
            "F1 at the last round without falling below it at some round (corrected intervals)"
        )
    return "; ".join(
        f"{line.name} saves labeled steps over random: F1 {line.versus['processbench_f1']} at "
        f"equal steps at its last round, never below random"
        for line in saving
    )


def write_csv(rows: Sequence[SimulationRow], path: str | Path) -> None:
    """One line per row: ``ROW_FIELDS`` and a ``subset_f1:<subset>`` column per subset."""
    import csv

    subsets = sorted({subset for row in rows for subset, _ in row.subset_f1})
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(
            handle, fieldnames=[*ROW_FIELDS, *(f"subset_f1:{s}" for s in subsets)]
        )
        writer.writeheader()
        for row in rows:
            values = {key: value for key, value in asdict(row).items() if key != "subset_f1"}
            values.update({f"subset_f1:{subset}": value for subset, value in row.subset_f1})
            writer.writerow(
                {
                    key: (f"{value:.6f}" if isinstance(value, float) else value)
                    for key, value in values.items()
                }
            )


def plot_learning_curves(rows: Sequence[SimulationRow], path: str | Path) -> None:
    """Four panels, held-out ProcessBench F1 (pooled, and the mean of per-subset F1), step
    AUROC and first-error accuracy against labeled steps: one line per strategy (mean over
    seeds, x the mean labeled steps of the round) with its corrected 95% interval as a
    band; the baselines, which read no step, as horizontal lines with theirs."""
    import matplotlib

    matplotlib.use("Agg")  # headless: a worker or CI has no display
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(row.strategy for row in rows))
    seeds = sorted({row.seed for row in rows})
    figure, axes = plt.subplots(1, 4, figsize=(19, 4.2))
    titles = (
        "held-out ProcessBench F1 (pooled)",
        "held-out F1, mean over subsets",
        "held-out step AUROC",
        "held-out first-error accuracy",
    )
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
            spans = [resampled_interval([getattr(r, metric) for r in by_round[n]]) for n in rounds]
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
                f"{' = '.join(same)} (reads no step)",
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
