"""A machine-label run on a worker (``machine_label_run_execute``, the
``prm_training.machine_labels`` task's service): claim it, load its model, hand it to its
kind's work (``machine_label_sampling``, ``machine_label_rollouts``,
``machine_label_judge``), finish it and, where the project routes by machine sources,
ask for a routing pass. Safe to call again for the same run: each kind resumes from what
was stored."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError

from annotation.models import Project
from annotation.routing.services import chains_route_enqueue_on_commit
from prm_training.ml.generation import SamplingParams
from prm_training.ml.progress import Phase, RunCancelled
from prm_training.models import MachineLabelRun, MachineLabelRunKind, RunStatus
from prm_training.services.machine_label_engine import CountedEngine, WorkReport
from prm_training.services.machine_label_judge import judge_work
from prm_training.services.machine_label_rollouts import rollout_work
from prm_training.services.machine_label_sampling import sample_work
from prm_training.services.machine_labels import SOURCE_OF_KIND, machine_label_model_check
from prm_training.services.progress import RunProgress, run_kept_alive
from prm_training.services.runs import run_claim, run_failure_detail, run_finish

if TYPE_CHECKING:
    from prm_training.ml.generation import GenerationEngine

logger = logging.getLogger(__name__)


def machine_label_run_execute(
    *,
    run_id: int,
    task_id: str = "",
    worker: str = "",
    engine: GenerationEngine | None = None,
) -> MachineLabelRun | None:
    """Do the run's work. Called by the ``prm_training.machine_labels`` task; safe to call
    again for the same run (``services.runs``), and then it resumes from what was stored.
    ``engine``: the engine to generate with instead of loading the run's model (tests).
    Returns the run as it ended, or None when this call had nothing to do."""
    run = run_claim(MachineLabelRun, run_id, task_id=task_id, worker=worker)
    if run is None:
        return None
    try:
        with run_kept_alive(run):
            _execute(run, engine)
    except RunCancelled:
        run_finish(run, status=RunStatus.CANCELLED)
    except ValidationError as exc:
        run_finish(run, status=RunStatus.FAILED, error="; ".join(exc.messages))
    except Exception as exc:  # noqa: BLE001 - any failure ends the run; stored work stays
        logger.exception("Machine-label run %s failed", run.pk)
        run_finish(run, status=RunStatus.FAILED, error=run_failure_detail(exc))
    run.refresh_from_db()
    return run


def _execute(run: MachineLabelRun, engine: GenerationEngine | None) -> None:
    counted = CountedEngine(engine) if engine is not None else None
    progress = RunProgress(run)
    progress(Phase("loading", 0, 0, detail=run.model_name))
    if counted is None:
        from prm_training.ml.generation import engine_load

        model_dir = machine_label_model_check(name=run.model_name, project=run.project)
        counted = CountedEngine(engine_load(model_dir))
    report = WorkReport(run, counted, progress)
    params = SamplingParams(**{k: v for k, v in run.params.items() if k in _PARAM_NAMES})
    work = {
        MachineLabelRunKind.SAMPLE: sample_work,
        MachineLabelRunKind.ROLLOUT: rollout_work,
        MachineLabelRunKind.JUDGE: judge_work,
    }[MachineLabelRunKind(run.kind)]
    try:
        result = work(run, counted, params, report)
    except RunCancelled:
        report.flush()  # the counts of what was stored before it stopped
        raise
    report.flush()
    progress(Phase("writing", 0, 0, detail="done"))
    fields: dict[str, Any] = {"result": result, **report.counts()}
    finished = run_finish(run, status=RunStatus.SUCCEEDED, **fields)
    # New labels of a source may change what the lead's routing does (a project that
    # routes nothing has nothing to re-route: its rules' change sent that pass).
    if finished and run.kind in SOURCE_OF_KIND and _routes(project_id=run.project_id):
        chains_route_enqueue_on_commit(project_id=run.project_id)


def _routes(*, project_id: int) -> bool:
    """Whether the project's lead chose routing sources, as it stands now (a long run's
    project row is hours old)."""
    return bool(
        Project.objects.filter(pk=project_id).values_list("routing_sources", flat=True).first()
    )


_PARAM_NAMES = frozenset(SamplingParams().as_dict())
