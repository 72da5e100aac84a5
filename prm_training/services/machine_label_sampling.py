"""Sampling runs' work: N chains per chosen problem (``ml.sampling.sample_chains``), split
with the project's splitter, graded against the problem's reference (``ml.grading``) and
imported through the import service with their provenance; a redelivered run skips the
problems it already imported chains for."""

from __future__ import annotations

import io
import json
import logging
from collections import Counter
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError

from annotation.datasets.importers.generic import split_steps
from annotation.datasets.imports import ImportRejected, chain_import
from annotation.models import Chain, Problem
from prm_training.ml.generation import SamplingParams
from prm_training.models import MachineLabelRun
from prm_training.services.machine_label_engine import CountedEngine, WorkReport
from prm_training.services.machine_labels import SAMPLE_GROUP

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)


def sample_work(
    run: MachineLabelRun, engine: CountedEngine, params: SamplingParams, report: WorkReport
) -> dict[str, Any]:
    from prm_training.ml.grading import answers_equivalent, extract_answer
    from prm_training.ml.sampling import sample_chains

    project = run.project
    sampled = set(
        Chain.objects.filter(project=project, meta__sampling__run=run.pk).values_list(
            "problem_id", flat=True
        )
    )
    problems = {p.pk: p for p in Problem.objects.filter(pk__in=run.item_ids)}
    todo = [problems[pk] for pk in run.item_ids if pk in problems and pk not in sampled]
    result = dict(run.result or {})
    totals = Counter({k: int(v) for k, v in result.items() if isinstance(v, int)})
    report.start(
        done=len(run.item_ids) - len(todo),
        unit="problems",
        detail=f"{params.n} chains per problem",
    )
    for start in range(0, len(todo), SAMPLE_GROUP):
        report.check()
        group = todo[start : start + SAMPLE_GROUP]
        completions = sample_chains([problem.text for problem in group], engine, params)
        records: list[dict[str, Any]] = []
        for problem, drawn in zip(group, completions, strict=True):
            for index, completion in enumerate(drawn):
                steps = split_steps(completion.text, project.step_split)
                if not steps:
                    totals["empty"] += 1
                    continue
                answer = extract_answer(completion.text)
                correct = None
                if answer is not None and problem.reference_answer:
                    correct = answers_equivalent(answer, problem.reference_answer)
                totals["graded"] += correct is not None
                totals["correct"] += bool(correct)
                records.append(
                    {
                        "problem": problem.text,
                        "steps": steps,
                        "answer": answer or "",
                        "reference_answer": problem.reference_answer,
                        "generator": run.model_name,
                        "meta": {
                            "final_answer_correct": correct,
                            "sampling": {
                                "run": run.pk,
                                "problem": problem.pk,
                                "index": index,
                                "seed": params.seed,
                                "params": params.as_dict(),
                                "tokens": completion.tokens,
                                "finished": completion.finished,
                            },
                        },
                    }
                )
        if records:
            imported = _sampled_import(run=run, records=records, first=group[0].pk)
            totals["chains_created"] += imported.chains_created
            totals["chains_duplicate"] += imported.chains_duplicate
        for _ in group:
            report.item_done()
    return dict(totals)


def _sampled_import(*, run: MachineLabelRun, records: list[dict[str, Any]], first: int) -> Any:
    """Import sampled chains through the import service, as a generic JSON Lines file:
    deduplicated against the project, counted in an import batch named for the run."""
    data = "\n".join(json.dumps(record, ensure_ascii=False) for record in records) + "\n"
    try:
        return chain_import(
            project=run.project,
            path=io.BytesIO(data.encode("utf-8")),
            filename=f"sampling-run-{run.pk}-from-problem-{first}.jsonl",
            fmt="generic",
            user=run.started_by,
        )
    except ImportRejected as exc:
        raise ValidationError(
            f"Sampled chains were refused by the import: {exc.summary()}"
        ) from None
