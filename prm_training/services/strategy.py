"""Which acquisition strategy steers a project's queue: the one ML staff set, or with
'auto' (the default) the one the evidence on the project's own labels supports.

The evidence is ``manage.py simulate_active_learning --project ID --save``: the paired
simulation of ``prm_training.ml.simulate`` replayed on the project's labeled chains,
stored on the loop settings (``strategy_evidence``). 'auto' then applies the strategy
whose held-out F1 beats random's with a 95% interval above zero, and that is not
significantly worse than random on AUROC or first-error accuracy; the best such by F1.
Without such a strategy, or without evidence, it is random: on ProcessBench no strategy
has yet beaten random (BENCHMARKS.md, issue #15), so a model-driven default would cost
labels. Every choice comes with the sentence that says why; the ML page shows it.

A zero-shot version (an open PRM's own step scores, ``PRMConfig.zero_shot``) scoring a
project that has no held-out labels is the exception: there is nothing to compare it or
the strategies on, and it is not a head trained on a handful of labels but a PRM that
was trained to find errors. So until the evidence has lines, 'auto' applies ``entropy``,
its step uncertainty (per step that would be rated): of the strategies it is the one that
needs no ensemble and the only one measured to gain over random on ProcessBench (AUROC
+0.018 ± 0.011, BENCHMARKS.md); the cold-start rule lets it steer
(``scoring.cold_start_strategy``).
"""

from __future__ import annotations

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
# What 'auto' applies for a zero-shot version with no held-out labels (module docstring).
ZERO_SHOT_STRATEGY = AcquisitionStrategy.ENTROPY.value


def version_zero_shot_unmeasured(version: ModelVersion) -> bool:
    """Whether ``version`` is zero-shot with no held-out comparison with the rules (the
    project had no labeled held-out chains when it was made)."""
    from prm_training.ml.baselines import verdict_against_rules

    return version.is_zero_shot and verdict_against_rules(version.metrics).beaten is None


def strategy_evidence_build(
    rows: Sequence[SimulationRow],
    *,
    sim: SimulationConfig,
    chains: int,
    snapshot_version: int | None,
) -> dict[str, Any]:
    """The stored form of a simulation on a project's labels: per strategy its paired
    differences with random at the last round, and the choice they support."""
    from prm_training.ml.simulate import summarize

    lines = []
    for line in summarize(rows):
        if line.is_baseline or line.name == RANDOM:
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
                },
            }
        )
    evidence: dict[str, Any] = {
        "at": timezone.now().isoformat(),
        "snapshot": snapshot_version,
        "chains": chains,
        "seeds": len(sim.seeds),
        "rounds": sim.rounds,
        "batch": sim.batch,
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


def strategy_from_evidence(evidence: dict[str, Any]) -> tuple[str, str]:
    """(strategy, why) from stored evidence (the rule of the module docstring)."""
    where = (
        f"over {evidence.get('seeds')} seeds on the project's {evidence.get('chains')} "
        "labeled chains"
    )
    supported = [
        line
        for line in evidence.get("lines", [])
        if line["processbench_f1"]["low"] > 0
        and line["step_auroc"]["high"] >= 0
        and line["first_error_accuracy"]["high"] >= 0
    ]
    if supported:
        best = max(supported, key=lambda line: line["processbench_f1"]["mean"])
        return best["strategy"], f"F1 {best['processbench_f1']['text']} against random {where}"
    lines = evidence.get("lines", [])
    if not lines:
        return RANDOM, str(evidence.get("why") or "no strategy was compared")
    best = max(lines, key=lambda line: line["processbench_f1"]["mean"])
    return RANDOM, (
        f"no strategy beats random {where} (the best, {best['strategy']}, "
        f"F1 {best['processbench_f1']['text']})"
    )


def acquisition_strategy_resolve(
    *, loop: ProjectTrainingSettings, version: ModelVersion | None = None
) -> tuple[str, str]:
    """(the strategy a scoring run of this project applies by default, why): the one set,
    or with 'auto' the one ``strategy_from_evidence`` supports; without evidence lines and
    with a zero-shot ``version`` (the one scoring) that nothing measured,
    ``ZERO_SHOT_STRATEGY`` (module docstring)."""
    if loop.acquisition_strategy != AUTO_STRATEGY:
        return loop.acquisition_strategy, "set in the loop settings"
    lines = (loop.strategy_evidence or {}).get("lines")
    if not lines and version is not None and version_zero_shot_unmeasured(version):
        return ZERO_SHOT_STRATEGY, (
            f"v{version.version} is zero-shot with no labeled held-out chains: the open "
            "PRM's own step uncertainty orders the queue until a comparison on this "
            "project's labels says otherwise"
        )
    if not loop.strategy_evidence:
        return RANDOM, (
            "no comparison on this project's labels yet (manage.py "
            f"simulate_active_learning --project {loop.project_id} --save)"
        )
    return strategy_from_evidence(loop.strategy_evidence)


def strategy_evidence_save(*, loop: ProjectTrainingSettings, evidence: dict[str, Any]) -> None:
    loop.strategy_evidence = evidence
    loop.save(update_fields=["strategy_evidence", "updated_at"])
