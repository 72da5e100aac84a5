"""The PRM as a machine-label source (``MachineSource.PRM``): a scoring run's verdicts on
the chains it scored, which pre-labels, routing, the review page and snapshots read as
they read a judge's or rollouts' (``annotation.routing.machine_labels``).

- Which chains: those the run scored (``scoring.chains_to_score``: open, no human pass
  yet), every step of each. Written once the run has scored every chain, before the
  queue's priorities, so a cancelled or failed run writes no verdict (the data manager
  shows only a succeeded run's scores too).
- The verdict: the version's own readout (``ml.readout.step_verdicts``, with the
  threshold chosen when it was trained and, where the version reads answers, the final
  answer's grade): +1 before its first error, -1 at it, each later step by its side of
  the threshold. ``value`` keeps P(correct) (already calibrated: the checkpoint's Platt
  scaling is applied when scoring), ``confidence`` the probability of the verdict.
- Provenance: ``run_kind`` "scoring" and ``run_id`` the run; ``model`` names the version,
  ``detail`` holds its id and the threshold applied, ``config_hash`` the checkpoint and
  readout. Unique per step, source and run: a redelivered run rewrites the same rows.
- Bounded: the run's scores are read ``LABEL_PAGE`` chains at a time, written in
  batches of ``LABEL_BATCH`` rows.

Never a vote: nothing here touches annotations, overlap or the finished count."""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from annotation.datasets.snapshot_reads import stated_verdict
from annotation.models import Chain, MachineLabel, MachineSource, Step
from prm_training.models import ChainScore, ScoringRun

if TYPE_CHECKING:
    from prm_training.ml.readout import Readout

# What a scoring run's machine labels name as their run (``MachineLabel.run_kind``).
PRM_RUN_KIND = "scoring"
# Chains whose scores are read per round, and label rows per INSERT.
LABEL_PAGE = 1_000
LABEL_BATCH = 2_000


def readout_hash(*, run: ScoringRun, readout: Readout) -> str:
    """The digest the run's labels carry: the version, its checkpoint and its readout, so
    labels compare only where they were read the same way."""
    version = run.model_version
    payload = {
        "model_version": version.pk,
        "checkpoint_dir": version.checkpoint_dir,
        "threshold": readout.threshold,
        "threshold_right": readout.threshold_right,
    }
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def prm_labels_write(*, run: ScoringRun, readout: Readout) -> int:
    """Write the run's verdicts on every chain it scored as PRM machine labels (module
    docstring); how many rows were written. Safe to call again: the same rows are
    rewritten."""
    digest = readout_hash(run=run, readout=readout)
    written = 0
    last = 0
    while True:
        page = list(
            ChainScore.objects.filter(scoring_run=run, chain_id__gt=last)
            .order_by("chain_id")
            .values_list("chain_id", "step_probs")[:LABEL_PAGE]
        )
        if not page:
            return written
        last = page[-1][0]
        labels = _page_labels(run=run, readout=readout, scores=dict(page), digest=digest)
        MachineLabel.objects.bulk_create(
            labels,
            batch_size=LABEL_BATCH,
            update_conflicts=True,
            unique_fields=["step", "source", "run_kind", "run_id"],
            update_fields=["rating", "value", "confidence", "detail", "model", "config_hash"],
        )
        written += len(labels)


def _page_labels(
    *, run: ScoringRun, readout: Readout, scores: dict[int, list[float]], digest: str
) -> list[MachineLabel]:
    """The labels of one page of scored chains (``scores``: chain -> P(correct) per step)."""
    from prm_training.ml.readout import step_verdicts

    grades = _answer_grades(chain_ids=list(scores)) if readout.threshold_right is not None else {}
    steps: dict[tuple[int, int], int] = {
        (chain_id, index): step_id
        for step_id, chain_id, index in Step.objects.filter(chain_id__in=list(scores)).values_list(
            "id", "chain_id", "index"
        )
    }
    version = run.model_version
    labels = []
    for chain_id, probs in scores.items():
        grade = grades.get(chain_id)
        threshold = readout.threshold
        if readout.threshold_right is not None and grade:
            threshold = readout.threshold_right
        detail = {"model_version": version.pk, "version": version.version, "threshold": threshold}
        for index, (p, verdict) in enumerate(
            zip(probs, step_verdicts(probs, readout, grade), strict=True)
        ):
            step_id = steps.get((chain_id, index))
            if step_id is None:  # a step the chain no longer has
                continue
            labels.append(
                MachineLabel(
                    project_id=run.project_id,
                    chain_id=chain_id,
                    step_id=step_id,
                    source=MachineSource.PRM,
                    rating=verdict,
                    value=min(max(float(p), 0.0), 1.0),
                    confidence=float(p) if verdict == 1 else 1.0 - float(p),
                    detail=detail,
                    model=f"model v{version.version}",
                    config_hash=digest,
                    run_kind=PRM_RUN_KIND,
                    run_id=run.pk,
                )
            )
    return labels


def _answer_grades(*, chain_ids: list[int]) -> dict[int, bool | None]:
    """Each chain's final answer graded as the version's readout grades it
    (``ml.inputs.answer_grade``: the import's own verdict, else the answer against the
    reference). Only for a version whose readout reads answers."""
    from prm_training.ml.data import ChainExample
    from prm_training.ml.inputs import answer_grade

    return {
        chain_id: answer_grade(
            ChainExample(
                chain_id=chain_id,
                problem="",
                steps=(),
                answer=answer,
                reference_answer=reference,
                answer_correct=stated_verdict(meta),
            )
        )
        for chain_id, answer, reference, meta in Chain.objects.filter(pk__in=chain_ids).values_list(
            "id", "final_answer", "problem__reference_answer", "meta"
        )
    }
