"""Which acquisition strategy steers a project's queue: the one ML staff set, or with
'auto' (the default) the one the evidence on the project's own labels supports.

The evidence is a simulation run (the ML page's "Simulate strategies" button,
``services.simulation``; or ``manage.py simulate_active_learning --project ID --save``):
the paired simulation of ``prm_training.ml.simulate`` replayed on the project's labeled
chains, stored on the loop settings (``strategy_evidence``). Strategies are compared with random
at equal labeled steps (what an annotator's hour buys), each interval corrected for the
seeds' overlapping splits (``ml.paired.resampled_interval``). 'auto' applies a strategy
only when it saves labeled steps (``ml.simulate.saves_steps``): above random on F1 at its
last round, and below it at no round on F1, AUROC or first-error accuracy; the best such
by F1. Otherwise, or without evidence, it is random: on ProcessBench's GSM8K and MATH
chains no strategy saves steps over random (BENCHMARKS.md, issue #26), so a
model-driven default would cost labels. Evidence stored before the comparison was made at
equal steps (no ``below`` per round) supports nothing: run the simulation again. Every
choice comes with the sentence that says why; the ML page shows it.

A zero-shot version (an open PRM's own step scores, ``PRMConfig.zero_shot``) scoring a
project with no held-out labels changes nothing here: no figure Steplab holds shows a
strategy steered by an unmeasured PRM saving labels, so 'auto' stays random until the
project's labels give evidence. ML staff may still set a strategy by hand, and the
cold-start rule (``scoring.cold_start_strategy``) then lets such a version steer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from prm_training.models import (
    AUTO_STRATEGY,
    AcquisitionStrategy,
    ModelVersion,
    ProjectTrainingSettings,
)

if TYPE_CHECKING:
    from prm_training.ml.simulate import SimulationConfig, SimulationRow

RANDOM = AcquisitionStrategy.RANDOM.value


def version_zero_shot_unmeasured(version: ModelVersion) -> bool:
    """Whether ``version`` is zero-shot with no held-out comparison with the rules (the
    project had no labeled held-out chains when it was made)."""
    from prm_training.ml.baselines import verdict_against_baselines

    return version.is_zero_shot and verdict_against_baselines(version.metrics).beaten is None


def strategy_evidence_build(
    rows: Sequence[SimulationRow],
    *,
    sim: SimulationConfig,
    chains: int,
    snapshot_version: int | None,
) -> dict[str, Any]:
    """The stored form of a simulation on a project's labels: per strategy its paired
    differences with random at the last round, and the choice they support."""
    from prm_training.ml.simulation_report import summarize

    lines = []
    for line in summarize(rows, heldout_fraction=sim.heldout_fraction):
        if line.is_baseline or line.is_machine_arm or line.name == RANDOM:
            continue
        lines.append(
            {
                "strategy": line.name,
                "labeled_steps": round(line.labeled_steps),
                **{
                    metric: {
                        "mean": gap.mean,
                        "low": gap.low,
                        "high": gap.high,
                        "text": str(gap),
                    }
                    for metric, gap in line.versus.items()
                    if math.isfinite(gap.low) and math.isfinite(gap.high)
                },
                "below": {metric: list(rounds) for metric, rounds in line.below.items()},
                "saves_steps": bool(line.saves_steps),
            }
        )
    evidence: dict[str, Any] = {
        "at": timezone.now().isoformat(),
        "snapshot": snapshot_version,
        "chains": chains,
        "seeds": len(sim.seeds),
        "rounds": sim.rounds,
        "batch": sim.batch,
        "comparison": "equal labeled steps, corrected intervals",
        "lines": lines,
    }
    evidence["chosen"], evidence["why"] = strategy_from_evidence(evidence)
    return evidence


def strategy_evidence_too_few(
    *, chains: int, needed: int, snapshot_version: int | None
) -> dict[str, Any]:
    """The stored form of "not enough labels to compare strategies"."""
    return {
        "at": timezone.now().isoformat(),
        "snapshot": snapshot_version,
        "chains": chains,
        "lines": [],
        "chosen": RANDOM,
        "why": f"{chains} labeled chains are too few for a paired comparison "
        f"(the simulation needs {needed})",
    }


def _saves(line: dict[str, Any]) -> bool:
    """``ml.simulate.saves_steps`` on a stored line (False for one stored before the
    comparison at equal steps, which has no ``below``)."""
    from prm_training.ml.simulation_report import saves_steps

    below = line.get("below")
    f1 = line.get("processbench_f1") or {}
    if not isinstance(below, dict):
        return False
    return saves_steps(f1.get("low"), below)


def strategy_from_evidence(evidence: dict[str, Any]) -> tuple[str, str]:
    """(strategy, why) from stored evidence (the rule of the module docstring)."""
    where = (
        f"over {evidence.get('seeds')} seeds on the project's {evidence.get('chains')} "
        "labeled chains"
    )
    lines = evidence.get("lines", [])
    if not lines:
        return RANDOM, str(evidence.get("why") or "no strategy was compared")
    if not any(isinstance(line.get("below"), dict) for line in lines):
        return RANDOM, (
            "the stored comparison predates the rule (strategies at equal labeled steps, "
            "not below random at any round): run the simulation again"
        )
    supported = [line for line in lines if _saves(line)]
    if supported:
        best = max(supported, key=lambda line: line["processbench_f1"]["mean"])
        return best["strategy"], (
            f"saves labeled steps: F1 {best['processbench_f1']['text']} against random at "
            f"equal labeled steps, never below it, {where}"
        )
    best = max(lines, key=lambda line: line.get("processbench_f1", {}).get("mean", -1.0))
    gap = best.get("processbench_f1", {}).get("text", "n/a")
    below = [
        f"{metric} at round {', '.join(map(str, rounds))}"
        for metric, rounds in (best.get("below") or {}).items()
        if rounds
    ]
    return RANDOM, (
        f"no strategy saves labeled steps over random {where} (the best, {best['strategy']}, "
        f"F1 {gap} at equal steps"
        + (f"; below random on {'; '.join(below)}" if below else "")
        + ")"
    )


def acquisition_strategy_resolve(
    *, loop: ProjectTrainingSettings, version: ModelVersion | None = None
) -> tuple[str, str]:
    """(the strategy a scoring run of this project applies by default, why): the one set,
    or with 'auto' the one ``strategy_from_evidence`` supports (random without evidence,
    whatever ``version``, the one scoring, is: module docstring)."""
    if loop.acquisition_strategy != AUTO_STRATEGY:
        return loop.acquisition_strategy, "set in the loop settings"
    if not loop.strategy_evidence:
        unmeasured = version is not None and version_zero_shot_unmeasured(version)
        return RANDOM, (
            (
                f"v{version.version} is zero-shot with no labeled held-out chains, and no "
                "measured figure shows an unmeasured PRM's uncertainty saving labels; "
                if unmeasured and version is not None
                else ""
            )
            + "no comparison on this project's labels yet (run one with \"Simulate "
            'strategies" on the ML page)'
        )
    return strategy_from_evidence(loop.strategy_evidence)


def strategy_evidence_save(*, loop: ProjectTrainingSettings, evidence: dict[str, Any]) -> None:
    loop.strategy_evidence = evidence
    loop.save(update_fields=["strategy_evidence", "updated_at"])
