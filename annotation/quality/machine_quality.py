"""How good each machine source is, measured against people (issue 23): per source, Cohen's
kappa on the steps both rated and the share of chains whose first error it places where
people do, against the human consensus and against gold, with a confusion matrix and 95%
intervals. Routing reads it: a source under the lead's threshold routes nothing.

The human consensus here is people's alone: the project's consensus method over human
votes and rulings, imported labels ignored (an import's labels may be a machine's). A
step whose votes tie is no verdict and is left out. Gold is a chain's answer key.

Kappa's interval is a percentile bootstrap over chains (a chain's steps are not
independent of each other: resampling chains keeps them together), first-error
accuracy's is Wilson's. A source's labels are the newest run's per step
(``machine_labels.machine_chain_labels``); its first error is the verdict routing would
act on, the references' what they settle (``annotation.first_error``: "settled" and
"reference"): a run cancelled before the last step, or a search stopped before it
narrowed the error to one step, is not compared."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from django.db.models import F

from annotation.first_error import first_error
from annotation.models import Chain, ImportLabels, MachineLabel, MachineSource, Project, StepRating
from annotation.quality.consensus import consensus_for_chains
from annotation.quality.prelabel_effects import Proportion, wilson
from annotation.routing.machine_labels import machine_chain_labels

RATINGS = (-1, 0, 1)
BOOTSTRAP_RESAMPLES = 1000
REFERENCES = ("consensus", "gold")

Labels = Sequence[int | None]


@dataclass(frozen=True, slots=True)
class Agreement:
    """One source against one reference. ``confusion[i][j]``: steps the reference rates
    ``RATINGS[i]`` and the source ``RATINGS[j]``."""

    reference: str
    chains: int
    steps: int
    kappa: float | None
    kappa_low: float | None
    kappa_high: float | None
    first_error: Proportion
    confusion: list[list[int]]


@dataclass(frozen=True, slots=True)
class SourceQuality:
    source: str
    name: str
    chains_labeled: int
    against: list[Agreement]  # one per REFERENCES entry


def cohen_kappa(confusion: np.ndarray) -> float | None:
    """Cohen's kappa of a square confusion matrix: (observed - chance) / (1 - chance);
    None without pairs or where chance agreement is certain (one rating only).

    >>> cohen_kappa(np.array([[20, 5], [10, 15]]))
    0.4
    >>> cohen_kappa(np.array([[3, 0], [0, 0]])) is None
    True
    """
    total = float(confusion.sum())
    if total == 0:
        return None
    observed = float(np.trace(confusion)) / total
    chance = float((confusion.sum(axis=0) * confusion.sum(axis=1)).sum()) / total**2
    if chance >= 1.0:
        return None
    return (observed - chance) / (1.0 - chance)


def _compare(
    machine: Mapping[int, Labels], reference: Mapping[int, Labels], name: str
) -> Agreement:
    """``machine`` against ``reference`` on the chains both label."""
    per_chain: list[np.ndarray] = []
    hits = compared = 0
    for chain_id in sorted(machine.keys() & reference.keys()):
        ours, theirs = machine[chain_id], reference[chain_id]
        matrix = np.zeros((3, 3), dtype=np.int64)
        for mine, truth in zip(ours, theirs, strict=False):
            if mine is not None and truth is not None:
                matrix[RATINGS.index(truth), RATINGS.index(mine)] += 1
        truth_error = first_error(theirs, reading="reference")
        our_error = first_error(ours, reading="settled")
        if truth_error is not None and our_error is not None:
            compared += 1
            hits += int(truth_error == our_error)
        if matrix.sum() or truth_error is not None:
            per_chain.append(matrix)
    stack = np.stack(per_chain) if per_chain else np.zeros((0, 3, 3), dtype=np.int64)
    confusion = stack.sum(axis=0) if per_chain else np.zeros((3, 3), dtype=np.int64)
    low, high = _kappa_interval(stack)
    return Agreement(
        reference=name,
        chains=len(per_chain),
        steps=int(confusion.sum()),
        kappa=cohen_kappa(confusion),
        kappa_low=low,
        kappa_high=high,
        first_error=wilson(hits, compared),
        confusion=confusion.tolist(),
    )


def _kappa_interval(per_chain: np.ndarray) -> tuple[float | None, float | None]:
    """The 2.5th and 97.5th percentiles of kappa over chains resampled with replacement
    (a fixed seed: the page shows the same interval on every load)."""
    if len(per_chain) < 2:
        return None, None
    rng = np.random.default_rng(0)
    picks = rng.integers(0, len(per_chain), size=(BOOTSTRAP_RESAMPLES, len(per_chain)))
    kappas = [k for pick in picks if (k := cohen_kappa(per_chain[pick].sum(axis=0))) is not None]
    if len(kappas) < BOOTSTRAP_RESAMPLES // 2:
        return None, None
    low, high = np.percentile(kappas, [2.5, 97.5])
    return float(low), float(high)


def human_consensus_labels(project: Project, step_counts: Mapping[int, int]) -> dict[int, Labels]:
    """People's consensus per chain (ties left out), for the chains people labeled."""
    consensus = consensus_for_chains(
        chain_step_counts=step_counts, import_labels=ImportLabels.IGNORE, project=project
    )
    return {
        chain_id: [
            None if (index < len(found.tied) and found.tied[index]) else label
            for index, label in enumerate(found.labels)
        ]
        for chain_id, found in consensus.items()
        if found.has_label
    }


def _gold(project: Project, step_counts: Mapping[int, int]) -> dict[int, Labels]:
    """The answer key of the gold chains among ``step_counts``."""
    keys: dict[int, dict[int, int]] = {}
    for chain_id, index, rating in StepRating.objects.filter(
        annotation__chain__project=project,
        annotation__chain__is_gold=True,
        annotation__chain__gold_annotation_id=F("annotation_id"),
        annotation__chain_id__in=list(step_counts),
    ).values_list("annotation__chain_id", "step__index", "rating"):
        keys.setdefault(chain_id, {})[index] = rating
    return {
        chain_id: [by_index.get(index) for index in range(step_counts[chain_id])]
        for chain_id, by_index in keys.items()
    }


def machine_source_quality(*, project: Project) -> list[SourceQuality]:
    """Every machine source that rated steps of the project, in ``MachineSource`` order,
    against the human consensus and gold (module docstring)."""
    sources = sorted(
        set(
            MachineLabel.objects.filter(project=project, rating__isnull=False)
            .values_list("source", flat=True)
            .distinct()
        ),
        key=lambda s: list(MachineSource.values).index(s) if s in MachineSource.values else 99,
    )
    labels = {
        source: {
            chain_id: found[0]
            for chain_id, found in machine_chain_labels(
                project_id=project.pk, source=source
            ).items()
        }
        for source in sources
    }
    chain_ids = sorted({chain_id for by_chain in labels.values() for chain_id in by_chain})
    step_counts = dict(Chain.objects.filter(pk__in=chain_ids).values_list("pk", "step_count"))
    references = {
        "consensus": human_consensus_labels(project, step_counts),
        "gold": _gold(project, step_counts),
    }
    return [
        SourceQuality(
            source=source,
            name=str(MachineSource(source).label) if source in MachineSource.values else source,
            chains_labeled=len(labels[source]),
            against=[_compare(labels[source], references[name], name) for name in REFERENCES],
        )
        for source in sources
    ]
