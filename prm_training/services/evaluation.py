"""Every model version on every evaluation set of its project, and the promotion rule
that reads it.

The training task measures a new version on each evaluation set
(``annotation.datasets.evaluation_sets``) before it publishes it, from its checkpoint:
the official report (``ml.evaluation.evaluation_report``: ProcessBench F1 per subset and
their mean, pooled F1, AUROC, PRMScore where the labels go past a first error), the same
chains scored by the baselines the checkpoint kept (fitted on its own training chains:
the position prior, the outcome rule, the text-blind head), and the paired problem-
bootstrap interval of the version minus the strongest of them. The labels are those of
the run's snapshot (the consensus the project's rules give, imported labels included
where they count); a chain of the set with none there is counted, not scored.

A version *loses* on a set when its official F1 (the mean over subsets) or its step
AUROC is below the strongest baseline's with the whole interval under zero: "beats the
baselines" needs both figures (``ml.baselines.verdict_against_baselines``), so not
losing needs both too. With the project's
``promotion_needs_evaluation_sets`` on, a version becomes active (after its run or by
hand) only when it was measured on every evaluation set and loses on none; a set marked
after the version was trained has no figures of it until an evaluation run fills them
(``services.evaluation_runs``), and the version is not promoted on faith. The rule reads
only figures that were stored: a training run's figures on a set whose chains changed
before it published are refused by ``evaluation_results_write``, and the version counts
as unmeasured there (``model_versions.training_run_publish``).

Torch is imported only inside ``evaluation_sets_measure`` (the worker's side)."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from annotation.models import (
    Chain,
    EvaluationSet,
    Project,
    Snapshot,
    SnapshotChain,
    SnapshotSplit,
)
from prm_training.ml.progress import PhaseMeter, PhaseReport, step_count
from prm_training.models import EvaluationResult, ModelVersion, ProjectTrainingSettings
from prm_training.services.examples import snapshot_chain_examples
from prm_training.services.runs import feature_cache_dir

logger = logging.getLogger(__name__)

# The figures a version must not lose on: ProcessBench's own F1 (per subset, averaged; the
# pooled F1 where the report has no subsets), and the step AUROC.
VERDICT_F1_FIGURES = ("mean_subset_f1", "f1")
VERDICT_AUROC = "auroc"


@dataclass(frozen=True)
class SetFigures:
    """One version's figures on one evaluation set, before they are stored."""

    evaluation_set_id: int
    name: str
    chains: int
    unlabeled_chains: int
    report: dict[str, Any] = field(default_factory=dict)
    truncation: dict[str, float] = field(default_factory=dict)
    loses: bool | None = None
    # The set's chains when they were read: figures are stored only while it still holds
    # them (``evaluation_results_write``).
    members: frozenset[int] = frozenset()


def _gap_high(versus: Mapping[str, Any], figure: str) -> float | None:
    gap = versus.get(figure)
    if gap and "high" in gap and math.isfinite(float(gap["high"])):
        return float(gap["high"])
    return None


def report_loses(report: Mapping[str, Any]) -> bool | None:
    """Whether the report's model is below its strongest baseline on the official F1 or
    on the step AUROC, the interval of the difference under zero; None where the report
    has neither difference (no labeled chain, no baseline kept).

    >>> report_loses({"versus_strongest": {"mean_subset_f1": {"mean": -0.1, "high": -0.02}}})
    True
    >>> report_loses({"versus_strongest": {"f1": {"mean": -0.1, "high": 0.01}}})
    False
    >>> report_loses({"versus_strongest": {"f1": {"high": 0.01}, "auroc": {"high": -0.2}}})
    True
    """
    versus = report.get("versus_strongest") or {}
    f1 = next(
        (high for figure in VERDICT_F1_FIGURES if (high := _gap_high(versus, figure)) is not None),
        None,
    )
    highs = [high for high in (f1, _gap_high(versus, VERDICT_AUROC)) if high is not None]
    return any(high < 0 for high in highs) if highs else None


def set_members(*, evaluation_set_ids: Iterable[int]) -> dict[int, frozenset[int]]:
    """{set id: the chains it holds now} of those sets that still exist."""
    members: dict[int, set[int]] = {
        pk: set()
        for pk in EvaluationSet.objects.filter(pk__in=list(evaluation_set_ids)).values_list(
            "pk", flat=True
        )
    }
    for chain_id, set_id in Chain.objects.filter(evaluation_set_id__in=list(members)).values_list(
        "pk", "evaluation_set_id"
    ):
        members[set_id].add(chain_id)
    return {pk: frozenset(chains) for pk, chains in members.items()}


def _set_examples(
    snapshot: Snapshot | None, only: set[int] | None = None, leave: frozenset[int] = frozenset()
) -> tuple[dict[int, list[Any]], dict[int, int], dict[int, frozenset[int]]]:
    """({set id: its chains with labels in ``snapshot``}, {set id: its chains}, {set id:
    its chains, ``leave`` included}) of the snapshot's project, every set of it (those in
    ``only`` when given), without the chains in ``leave``."""
    if snapshot is None:
        return {}, {}, {}
    sets = EvaluationSet.objects.filter(project_id=snapshot.project_id).values_list("pk", flat=True)
    members = set_members(evaluation_set_ids=[pk for pk in sets if only is None or pk in only])
    if not members:
        return {}, {}, {}
    member: dict[int, int] = {
        chain_id: set_id
        for set_id, chains in members.items()
        for chain_id in chains
        if chain_id not in leave
    }
    totals: dict[int, int] = {pk: 0 for pk in members}
    for set_id in member.values():
        totals[set_id] += 1
    labeled: dict[int, list[Any]] = {pk: [] for pk in members}
    for example in snapshot_chain_examples(snapshot=snapshot):
        owner = member.get(example.chain_id)
        if owner is not None and example.labels is not None:
            labeled[owner].append(example)
    return labeled, totals, members


def evaluation_sets_measure(
    *,
    checkpoint_dir: str,
    snapshot: Snapshot | None,
    phase: PhaseReport | None = None,
    only: set[int] | None = None,
    leave: frozenset[int] = frozenset(),
) -> list[SetFigures]:
    """The figures of the checkpoint on every evaluation set of the snapshot's project
    (those in ``only`` when given; none without a snapshot or a set), in set order, on
    their chains but those in ``leave`` (which the checkpoint may have trained on);
    ``phase`` gets an "evaluation sets" phase counted in steps."""
    labeled, totals, members = _set_examples(snapshot, only, leave)
    if not totals:
        return []
    from prm_training.ml.baselines import load_baselines
    from prm_training.ml.checkpoint import load_prm
    from prm_training.ml.evaluation import evaluation_report
    from prm_training.ml.score import score_chains, truncation_counts

    names = dict(EvaluationSet.objects.filter(pk__in=totals).values_list("pk", "name"))
    meter = PhaseMeter(phase)
    every = [example for examples in labeled.values() for example in examples]
    meter.start("evaluation sets", total=step_count(every), unit="steps", detail="loading")
    prm = load_prm(checkpoint_dir, cache_dir=str(feature_cache_dir()))
    baselines = load_baselines(checkpoint_dir)
    out = []
    for set_id in sorted(totals):
        examples = labeled[set_id]
        meter.set(meter.phase.done, detail=names[set_id])
        report: dict[str, Any] = {}
        cut: dict[str, float] = {}
        if examples:
            scores = list(score_chains(prm, examples, steps_done=meter.tick))
            scorers: dict[str, Any] = {"model": ([s.step_probs for s in scores], prm.readout)}
            if baselines is not None:
                scorers.update(baselines.scorers(examples))
            report = evaluation_report(examples, scorers, seed=prm.config.seed)
            cut = truncation_counts(prm.tokenizer, examples, prm.config)
        out.append(
            SetFigures(
                evaluation_set_id=set_id,
                name=names[set_id],
                chains=len(examples),
                unlabeled_chains=totals[set_id] - len(examples),
                report=report,
                truncation=cut,
                loses=report_loses(report),
                members=members[set_id],
            )
        )
    return out


def evaluation_results_write(
    *,
    version: ModelVersion,
    figures: Sequence[SetFigures],
    snapshot: Snapshot | None,
    replace: Iterable[int] = (),
) -> list[SetFigures]:
    """Store ``figures``, measured with ``snapshot``'s labels, as the version's results;
    those written. A set unmarked since it was measured is skipped, and so is one whose
    chains changed since they were read (``SetFigures.members``): a lead's change drops a
    set's figures and queues the next evaluation run in its own transaction
    (``evaluation_results_stale_drop``, ``services.evaluation_runs``), so figures of the
    old chains written after it would stand for chains the set no longer holds. Figures
    already stored for a (version, set) are kept, but on the sets in ``replace`` (figures
    measured on labels that changed since: ``evaluation_sets_fill``).

    Lock order: the project row (as the data manager's mover and the marking take it),
    inside the caller's transaction when there is one (the publish holds it already)."""
    with transaction.atomic():
        Project.objects.select_for_update().filter(pk=version.project_id).first()
        now = set_members(
            evaluation_set_ids=EvaluationSet.objects.filter(
                pk__in=[f.evaluation_set_id for f in figures], project_id=version.project_id
            ).values_list("pk", flat=True)
        )
        current = [f for f in figures if now.get(f.evaluation_set_id) == f.members]
        renewed = set(replace) & {f.evaluation_set_id for f in current}
        if renewed:
            EvaluationResult.objects.filter(
                model_version=version, evaluation_set_id__in=renewed
            ).delete()
        EvaluationResult.objects.bulk_create(
            [
                EvaluationResult(
                    model_version=version,
                    evaluation_set_id=f.evaluation_set_id,
                    chains=f.chains,
                    unlabeled_chains=f.unlabeled_chains,
                    report=f.report,
                    truncation=f.truncation,
                    loses=f.loses,
                    snapshot=snapshot,
                )
                for f in current
            ],
            ignore_conflicts=True,
        )
    return current


def evaluation_sets_fill(
    *,
    version: ModelVersion,
    snapshot: Snapshot | None,
    phase: PhaseReport | None = None,
    stale: frozenset[int] = frozenset(),
) -> int:
    """Measure ``version`` (an older one) on the project's evaluation sets that hold no
    figures of it (sets marked after it was trained, or whose figures were dropped when
    their chains changed) and on those in ``stale`` (its figures there measured on labels
    that changed since; they are replaced) with ``snapshot``'s labels; how many figures
    were written.
    Marked after it was trained, a set may hold chains the version learned from: those
    of its own snapshot's training split are left out, so its figures there count fewer
    chains than a newer version's."""
    missing = set(
        EvaluationSet.objects.filter(project_id=version.project_id)
        .exclude(results__model_version=version)
        .values_list("pk", flat=True)
    ) | set(stale)
    if not missing or snapshot is None:
        return 0
    trained: frozenset[int] = frozenset()
    if version.snapshot_id is not None and not version.is_zero_shot:
        trained = frozenset(
            SnapshotChain.objects.filter(
                snapshot_id=version.snapshot_id, split=SnapshotSplit.TRAIN
            ).values_list("chain_id", flat=True)
        )
    figures = evaluation_sets_measure(
        checkpoint_dir=version.checkpoint_dir,
        snapshot=snapshot,
        phase=phase,
        only=missing,
        leave=trained,
    )
    written = evaluation_results_write(
        version=version, figures=figures, snapshot=snapshot, replace=stale
    )
    return len(written)


def evaluation_results_stale_drop(*, project_id: int, evaluation_set_ids: Sequence[int]) -> int:
    """Drop every version's figures on ``evaluation_set_ids``, whose chains a lead just
    changed (the data manager's bulk action: the annotation app's
    ``evaluation_set_changed_register`` hook, in the transaction that changed them):
    they describe chains the set no longer holds. The next evaluation run measures every
    version there again (``services.evaluation_runs``). How many were dropped."""
    deleted, _ = EvaluationResult.objects.filter(
        evaluation_set_id__in=evaluation_set_ids, evaluation_set__project_id=project_id
    ).delete()
    return deleted


def promotion_refusal(
    *, project_id: int, measured: Mapping[int, bool | None], version: str
) -> str | None:
    """Why ``version`` may not become active under the project's evaluation set rule
    (``measured``: {set id: loses} of its results), or None when it may: the rule is off,
    the project has no set, or it was measured on every set and loses on none."""
    rule = ProjectTrainingSettings.objects.filter(
        project_id=project_id, promotion_needs_evaluation_sets=True
    ).exists()
    if not rule:
        return None
    sets = dict(EvaluationSet.objects.filter(project_id=project_id).values_list("pk", "name"))
    losing = sorted(sets[pk] for pk, loses in measured.items() if pk in sets and loses)
    unmeasured = sorted(name for pk, name in sets.items() if measured.get(pk) is None)
    reasons = []
    if losing:
        reasons.append(
            f"loses to the strongest baseline that reads no step on evaluation set(s) "
            f"{', '.join(losing)}"
        )
    if unmeasured:
        reasons.append(
            f"has no figures against a baseline on evaluation set(s) {', '.join(unmeasured)}"
        )
    if not reasons:
        return None
    return f"{version} {' and '.join(reasons)}: not made active (the project requires no loss)."


def model_version_promotion_refusal(*, version: ModelVersion) -> str | None:
    """``promotion_refusal`` of a stored version, from its stored results."""
    measured = dict(
        EvaluationResult.objects.filter(model_version=version).values_list(
            "evaluation_set_id", "loses"
        )
    )
    return promotion_refusal(
        project_id=version.project_id, measured=measured, version=f"v{version.version}"
    )
