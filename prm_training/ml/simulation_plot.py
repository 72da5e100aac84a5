"""The learning curves of a simulation (``simulate``) as a picture: one panel a metric,
one line a strategy with its corrected 95% band, the baselines as horizontal lines."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .baselines import BASELINES
from .paired import resampled_interval
from .simulate import BASELINE, METRICS, SimulationRow

# A baseline's label is a line of 7-point text: this share of a panel's height apart.
LABEL_GAP = 0.06


def label_heights(values: Sequence[float], bottom: float, top: float) -> list[float]:
    """Where the baselines' labels go, as a share of the panel's height: on their line
    (``values``, ascending, on an axis from ``bottom`` to ``top``), each moved up as far as
    it takes to clear the one below it by LABEL_GAP, so rules that score alike do not
    print their names over each other.

    >>> [round(h, 3) for h in label_heights([0.370, 0.374, 0.45], 0.2, 0.5)]
    [0.567, 0.627, 0.833]
    >>> label_heights([0.3, 0.4], 0.0, 1.0)
    [0.3, 0.4]
    """
    heights: list[float] = []
    for value in values:
        height = (value - bottom) / (top - bottom)
        heights.append(max(height, heights[-1] + LABEL_GAP) if heights else height)
    return heights


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
        values = sorted(rules)
        bottom, top = axis.get_ylim()
        for value, height in zip(values, label_heights(values, bottom, top), strict=True):
            axis.annotate(
                f"{' = '.join(rules[value])} (reads no step)",
                (0.01, height),
                xycoords="axes fraction",
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
