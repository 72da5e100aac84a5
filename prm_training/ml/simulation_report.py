"""What a simulation's rows say (``simulate``): each strategy, machine arm and baseline
against random at equal labeled steps with corrected intervals (``summarize``), the table
the command prints (``summary_table``), the machine arms' worth (``machine_table``), the
CSV and the learning curves."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from .baselines import BASELINES
from .machine_labeler import MACHINE_PREFIX
from .paired import HELDOUT_FRACTION, Interval, resampled_interval
from .simulate import (
    BASELINE,
    DECISION_METRICS,
    METRICS,
    RESOLVE_F1,
    ROW_FIELDS,
    SimulationRow,
)


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
