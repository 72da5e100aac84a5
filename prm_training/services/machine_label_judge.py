"""Judge runs' work: n critiques per chosen chain (``ml.judge.judge_chain``), each kept
raw (``JudgeSample``; an unreadable verdict is never a label), and labels from their
majority; a chain's samples and labels are written in one transaction, so a resumed run
skips the chains it stored."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db import transaction

from annotation.models import Chain, MachineLabel, MachineSource, Step
from prm_training.ml.generation import SamplingParams
from prm_training.models import JudgeSample, MachineLabelRun, MachineLabelRunKind
from prm_training.services.machine_label_engine import CountedEngine, WorkReport

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)


def judge_work(
    run: MachineLabelRun, engine: CountedEngine, params: SamplingParams, report: WorkReport
) -> dict[str, Any]:
    from prm_training.ml.judge import judge_chain, template_hash

    template = run.params["template"]
    digest = template_hash(template)
    judged = set(JudgeSample.objects.filter(run=run).values_list("chain_id", flat=True))
    chains = {c.pk: c for c in Chain.objects.filter(pk__in=run.item_ids).select_related("problem")}
    report.start(done=len(judged), unit="chains", detail=f"{params.n} samples per chain")
    for chain_id in run.item_ids:
        chain = chains.get(chain_id)
        if chain_id in judged:
            continue
        if chain is None:
            report.item_done()
            continue
        report.check()
        steps = list(Step.objects.filter(chain=chain).order_by("index"))
        verdict = judge_chain(engine, template, chain.problem.text, [s.text for s in steps], params)
        report.check()
        with transaction.atomic():
            JudgeSample.objects.bulk_create(
                [
                    JudgeSample(run=run, chain=chain, sample_index=index, text=text, verdict=parsed)
                    for index, (text, parsed) in enumerate(
                        zip(verdict.texts, verdict.verdicts, strict=True)
                    )
                ],
                ignore_conflicts=True,
            )
            MachineLabel.objects.bulk_create(
                _judge_labels(run, chain, steps, verdict.verdicts, verdict.majority, digest),
                ignore_conflicts=True,
            )
        report.item_done()
    samples = JudgeSample.objects.filter(run=run)
    return {
        "samples": samples.count(),
        "unparsed": samples.filter(verdict__isnull=True).count(),
        "labels": MachineLabel.objects.filter(
            run_kind=MachineLabelRunKind.JUDGE, run_id=run.pk
        ).count(),
    }


def _judge_labels(
    run: MachineLabelRun,
    chain: Chain,
    steps: list[Step],
    verdicts: Sequence[int | None],
    majority: int | None,
    digest: str,
) -> list[MachineLabel]:
    """Labels from the judges' majority: +1 before the step it names, -1 at it, none
    after it; -1 (no wrong step) labels every step +1; no majority, or one naming no step
    of the chain, labels nothing. ``confidence`` is the share of parsed samples that
    agree with it."""
    if majority is None or not -1 <= majority < len(steps):
        return []
    parsed = [v for v in verdicts if v is not None]
    votes = Counter(parsed)
    detail = {
        "samples": len(verdicts),
        "unparsed": len(verdicts) - len(parsed),
        "votes": {str(k): n for k, n in sorted(votes.items())},
        "majority": majority,
    }
    confidence = votes[majority] / len(parsed) if parsed else None
    last = len(steps) - 1 if majority == -1 else majority
    return [
        MachineLabel(
            project_id=run.project_id,
            chain=chain,
            step=step,
            source=MachineSource.JUDGE,
            rating=-1 if step.index == majority else 1,
            confidence=confidence,
            detail=detail,
            model=run.model_name,
            config_hash=digest,
            run_kind=MachineLabelRunKind.JUDGE,
            run_id=run.pk,
        )
        for step in steps
        if step.index <= last
    ]
