"""Rollout runs' work: Monte-Carlo values of each chosen chain's steps from rollouts of
their prefixes (``ml.rollouts``), stored as ``MachineLabel(source=monte_carlo)`` as each
step finishes (``mode`` "search": a binary search for the first step no rollout
recovers from, the first error marked). Values already stored are handed to the search
as ``done``, so a resumed run repeats no rollout."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import TYPE_CHECKING, Any

from annotation.models import Chain, MachineLabel, MachineSource, Step
from prm_training.ml.generation import SamplingParams
from prm_training.models import MachineLabelRun, MachineLabelRunKind
from prm_training.services.machine_label_engine import CountedEngine, WorkReport
from prm_training.services.runs import run_heartbeat

if TYPE_CHECKING:
    from prm_training.ml.rollouts import StepValue

logger = logging.getLogger(__name__)


def config_hash(run: MachineLabelRun) -> str:
    """The digest a rollout run's labels carry: its model and every parameter, so labels
    of two runs compare only where they were made the same way."""
    payload = {"model": run.model_name, **run.params}
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def rollout_work(
    run: MachineLabelRun, engine: CountedEngine, params: SamplingParams, report: WorkReport
) -> dict[str, Any]:
    from prm_training.ml.rollouts import StepValue, rollout_search, rollout_values

    mode = run.params.get("mode", "full")
    digest = config_hash(run)
    chains = {c.pk: c for c in Chain.objects.filter(pk__in=run.item_ids).select_related("problem")}
    stored = _stored_values(run)
    report.start(done=0, unit="chains", detail=f"{params.n} rollouts per step, {mode}")
    first_errors: dict[str, int | None] = dict(run.result.get("first_errors", {}))
    for chain_id in run.item_ids:
        chain = chains.get(chain_id)
        if chain is None:
            report.item_done()
            continue
        report.check()
        steps = list(Step.objects.filter(chain=chain).order_by("index"))
        texts = [step.text for step in steps]
        done = {
            index: StepValue(index=index, rollouts=rollouts, reached=reached)
            for index, (rollouts, reached) in stored.get(chain_id, {}).items()
        }
        if mode == "full" and len(done) == len(steps):
            report.item_done()
            continue

        current: Chain = chain

        def on_step(value: StepValue, chain: Chain = current, steps: list[Step] = steps) -> None:
            _value_store(run, chain, steps[value.index], value, mode=mode, digest=digest)
            report.check()

        if mode == "search":
            found = rollout_search(
                chain.problem.text,
                texts,
                chain.problem.reference_answer,
                engine,
                params,
                done=done,
                on_step=on_step,
                should_stop=report.progress.stop_requested,
                budget=run.params.get("budget"),
            )
            report.check()
            if found.decided:
                first_errors[str(chain_id)] = found.first_error
            if found.first_error is not None:
                _first_error_mark(run, steps[found.first_error])
            run_heartbeat(run, result={"first_errors": first_errors})
        else:
            rollout_values(
                chain.problem.text,
                texts,
                chain.problem.reference_answer,
                engine,
                params,
                done=done,
                on_step=on_step,
                should_stop=report.progress.stop_requested,
            )
            report.check()
        report.item_done()
    labels = MachineLabel.objects.filter(
        run_kind=MachineLabelRunKind.ROLLOUT, run_id=run.pk
    ).count()
    result: dict[str, Any] = {"labels": labels}
    if mode == "search":
        result["first_errors"] = first_errors
    return result


def _first_error_mark(run: MachineLabelRun, step: Step) -> None:
    """Mark the probed step the search found as the first error (``detail.first_error``)."""
    label = MachineLabel.objects.filter(
        step=step,
        source=MachineSource.MONTE_CARLO,
        run_kind=MachineLabelRunKind.ROLLOUT,
        run_id=run.pk,
    ).first()
    if label is not None and not label.detail.get("first_error"):
        label.detail = {**label.detail, "first_error": True}
        label.save(update_fields=["detail"])


def _stored_values(run: MachineLabelRun) -> dict[int, dict[int, tuple[int, int]]]:
    """The values this run stored, by chain and step index: (rollouts, reached)."""
    stored: dict[int, dict[int, tuple[int, int]]] = {}
    rows = MachineLabel.objects.filter(
        run_kind=MachineLabelRunKind.ROLLOUT, run_id=run.pk, source=MachineSource.MONTE_CARLO
    ).values_list("chain_id", "step__index", "detail")
    for chain_id, index, detail in rows:
        stored.setdefault(chain_id, {})[index] = (
            int(detail["rollouts"]),
            int(detail["reached"]),
        )
    return stored


def _value_store(
    run: MachineLabelRun, chain: Chain, step: Step, value: StepValue, *, mode: str, digest: str
) -> None:
    """One step's Monte-Carlo value, written at once (a kill loses at most the step being
    rolled out). Unique per step, source and run: a repeat writes nothing."""
    MachineLabel.objects.bulk_create(
        [
            MachineLabel(
                project_id=run.project_id,
                chain=chain,
                step=step,
                source=MachineSource.MONTE_CARLO,
                rating=1 if value.hard else -1,
                value=value.soft,
                detail={
                    "rollouts": value.rollouts,
                    "reached": value.reached,
                    "hard": value.hard,
                    "mode": mode,
                },
                model=run.model_name,
                config_hash=digest,
                run_kind=MachineLabelRunKind.ROLLOUT,
                run_id=run.pk,
            )
        ],
        ignore_conflicts=True,
    )
