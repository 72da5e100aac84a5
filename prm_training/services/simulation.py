"""Simulation runs: the paired active-learning simulation (``ml.simulate``) replayed on a
project's newest snapshot, run by a GPU worker with the lifecycle training and scoring
runs share (``services.runs``: claimed under a lock, phase with rate and ETA, heartbeat,
cancel, lost-worker reaping, retry). A run that succeeds stores its result as the
project's ``strategy_evidence``, what the 'auto' strategy chooses from
(``services.strategy``).

``manage.py simulate_active_learning --project ID`` replays a project in its own process
through the same path (``simulation_project_replay``); a run and the command differ only
in who follows them and where the result goes.

A run is started with a size, quick (a smoke test) or full (sized for ProcessBench), and
may ask fewer or more seeds and rounds within what the node allows
(``settings.STEPLAB_SIMULATION_LIMITS``): each seed costs 1 + strategies x rounds head
trainings on the project's automatic-run settings (the loop's ``default_config``)."""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction

from annotation.models import Project, Snapshot
from annotation.routing.machine_labels import machine_chain_labels
from prm_training.ml.progress import Phase, PhaseMeter, RunCancelled
from prm_training.ml.simulate import DEFAULT_SEEDS
from prm_training.models import (
    ProjectTrainingSettings,
    RunStatus,
    SimulationRun,
    SimulationSize,
)
from prm_training.selectors import project_training_settings_get
from prm_training.services.backbones import backbone_path
from prm_training.services.progress import RunProgress, run_kept_alive
from prm_training.services.runs import (
    feature_cache_dir,
    run_admission_check,
    run_cancel,
    run_claim,
    run_enqueue_on_commit,
    run_failure_detail,
    run_finish,
    run_retry_check,
    simulation_attempt_dir,
)
from prm_training.services.strategy import (
    strategy_evidence_build,
    strategy_evidence_save,
    strategy_evidence_too_few,
)
from prm_training.services.training_settings import NodeLimit

if TYPE_CHECKING:
    from prm_training.ml.config import PRMConfig
    from prm_training.ml.data import ChainExample
    from prm_training.ml.simulate import SimulationConfig, SimulationRow

logger = logging.getLogger(__name__)

# Run sizes: sized to resolve 0.02 F1 on ProcessBench, and a smoke test's (whose intervals
# resolve little). ``head_epochs`` None: the PRM's own.
SIZES: dict[str, dict[str, Any]] = {
    SimulationSize.QUICK: {"seeds": 3, "rounds": 2, "batch": 8, "seed_size": 8, "head_epochs": 5},
    SimulationSize.FULL: {
        "seeds": DEFAULT_SEEDS,
        "rounds": 8,
        "batch": 40,
        "seed_size": 20,
        "head_epochs": None,
    },
}
# How often a training inside a run reads the cancel flag (``PRMConfig.report_every_s``).
CANCEL_CHECK_SECONDS = 1.0


def simulation_node_limits() -> dict[str, NodeLimit]:
    """The most seeds and rounds one run may ask of this node, by name."""
    return {
        name: NodeLimit(value=value, variable=variable)
        for name, (value, variable) in django_settings.STEPLAB_SIMULATION_LIMITS.items()
    }


def simulation_size_clean(
    *, size: str, seeds: int | None = None, rounds: int | None = None
) -> tuple[int, int]:
    """(seeds, rounds) of a run of ``size``, the size's own where not given, each at least 1
    and at most the node's limit; raises ValidationError naming every bad field (and the
    limit, with the variable that raises it)."""
    if size not in SIZES:
        raise ValidationError({"size": f"Must be one of: {', '.join(SIZES)}."})
    asked = {"seeds": seeds, "rounds": rounds}
    errors: dict[str, list[str]] = {}
    limits = simulation_node_limits()
    for name, value in asked.items():
        value = SIZES[size][name] if value is None else value
        asked[name] = value
        if value < 1:
            errors[name] = ["Must be at least 1."]
        elif name in limits and value > limits[name].value:
            errors[name] = [str(limits[name])]
    if errors:
        raise ValidationError(errors)
    return int(asked["seeds"] or 0), int(asked["rounds"] or 0)


def simulation_config(*, size: str, seeds: int, rounds: int) -> SimulationConfig:
    """Every strategy (random, the reference, first) at ``size``'s batch and seed set."""
    from prm_training.ml.acquisition import STRATEGIES
    from prm_training.ml.simulate import BASELINE, SimulationConfig

    return SimulationConfig(
        strategies=tuple(dict.fromkeys([BASELINE, *STRATEGIES])),
        rounds=rounds,
        batch=SIZES[size]["batch"],
        seeds=tuple(range(seeds)),
        seed_size=SIZES[size]["seed_size"],
    )


def simulation_trainings(sim: SimulationConfig) -> int:
    """How many head trainings ``sim`` costs: per seed, round 0 and every strategy's rounds."""
    return len(sim.seeds) * (1 + (len(sim.strategies) + len(sim.machine_arms)) * sim.rounds)


# --- the project's path, shared with the command -----------------------------------------


@dataclass(frozen=True)
class ProjectReplay:
    """A simulation on a project's labels: its rows (none when the labels were too few),
    the evidence 'auto' reads from it, the labeled chains and the snapshot replayed."""

    rows: list[SimulationRow]
    evidence: dict[str, Any]
    chains: int
    snapshot_version: int


def simulation_project_examples(
    *, project_id: int
) -> tuple[list[ChainExample], dict[int, bool | None], Snapshot]:
    """(ChainExamples of the project's newest snapshot but its evaluation sets' chains,
    which the loop never labels nor trains on, their graded answers, the snapshot). The
    newest by when it was taken, of either kind: a lead's dataset or a training run's own
    (the two number apart, so a version alone says neither which is newer nor which it
    is: the evidence keeps the snapshot's label, v3 or t3). Raises ValidationError when
    there is no such project or snapshot."""
    from prm_training.ml.inputs import answer_grade
    from prm_training.services.examples import snapshot_chain_examples

    if not Project.objects.filter(pk=project_id).exists():
        raise ValidationError(f"no project {project_id}")
    snapshot = Snapshot.objects.filter(project_id=project_id).order_by("-created_at", "-pk").first()
    if snapshot is None:
        raise ValidationError(f"project {project_id} has no snapshot: take one first")
    examples = snapshot_chain_examples(snapshot=snapshot, without_evaluation=True)
    graded = {example.chain_id: answer_grade(example) for example in examples}
    return examples, graded, snapshot


def simulation_project_replay(
    *,
    project_id: int,
    sim: SimulationConfig,
    prm: PRMConfig,
    work_dir: Path,
    too_few_stored: bool,
    progress: Callable[[], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    warn: Callable[[str], None] | None = None,
) -> ProjectReplay:
    """Replay the project's newest snapshot as the oracle (``ml.simulate.simulate``) and
    build the evidence 'auto' reads from it; nothing is saved here. With
    ``too_few_stored``, labels too few for ``sim`` give the evidence that says so (and no
    rows) instead of an error. ``progress``/``should_stop``: as ``simulate`` takes them;
    ``warn`` hears what weakens the result. Raises ValidationError when the snapshot has no
    step label or cannot support ``sim``; RunCancelled where a report stopped it."""
    from prm_training.ml.machine_labeler import PRM_SOURCE
    from prm_training.ml.oracle import oracle_chains
    from prm_training.ml.simulate import simulate

    examples, graded, snapshot = simulation_project_examples(project_id=project_id)
    version = snapshot.version
    stored = {
        source: machine_chain_labels(project_id=project_id, source=source)
        for source in {arm.source for arm in sim.machine_arms} - {PRM_SOURCE}
    }
    labeled = oracle_chains(examples)
    if not labeled:
        raise ValidationError(
            f"no step labels in project {project_id}'s snapshot {snapshot.label}: the simulation "
            "replays labeled chains as the oracle"
        )
    needed = math.ceil((sim.seed_size + sim.rounds * sim.batch) / (1 - sim.heldout_fraction))
    if too_few_stored and len(labeled) < needed:
        evidence = strategy_evidence_too_few(
            chains=len(labeled), needed=needed, snapshot_version=version
        )
        evidence["snapshot_label"] = snapshot.label
        return ProjectReplay(
            rows=[], evidence=evidence, chains=len(labeled), snapshot_version=version
        )
    if warn and "convincing_wrong" in sim.strategies and all(v is None for v in graded.values()):
        warn(
            "no final answer can be graded (no reference answers); "
            "convincing_wrong ranks by step entropy only"
        )
    try:
        rows = simulate(
            labeled,
            sim,
            prm,
            answers_correct=graded,
            machine_labels=stored,
            work_dir=work_dir,
            progress=progress,
            should_stop=should_stop,
        )
    except ValueError as exc:
        raise ValidationError(str(exc)) from None
    evidence = strategy_evidence_build(rows, sim=sim, chains=len(labeled), snapshot_version=version)
    evidence["snapshot_label"] = snapshot.label
    return ProjectReplay(
        rows=rows, evidence=evidence, chains=len(labeled), snapshot_version=version
    )


def simulation_evidence_store(*, project_id: int, evidence: dict[str, Any]) -> None:
    """Store ``evidence`` where 'auto' reads it (the loop settings, made if missing)."""
    loop, _ = ProjectTrainingSettings.objects.get_or_create(project_id=project_id)
    strategy_evidence_save(loop=loop, evidence=evidence)


# --- start, cancel, retry ----------------------------------------------------------------


def simulation_run_start(
    *,
    project: Project,
    user: User | None,
    size: str,
    seeds: int | None = None,
    rounds: int | None = None,
    retry_of: SimulationRun | None = None,
) -> SimulationRun:
    """Create a QUEUED simulation run of ``size`` (``seeds``/``rounds`` within the node's
    limits, ``simulation_size_clean``) and enqueue it once committed. ``retry_of``: the
    failed or cancelled run it retries."""
    seeds, rounds = simulation_size_clean(size=size, seeds=seeds, rounds=rounds)
    with transaction.atomic():
        run_admission_check(SimulationRun, project_id=project.pk)
        run = SimulationRun.objects.create(
            project=project,
            size=size,
            seeds=seeds,
            rounds=rounds,
            started_by=user if user is not None and user.is_authenticated else None,
            retry_of=retry_of,
        )
        run_enqueue_on_commit(run)
    return run


def simulation_run_cancel(*, run: SimulationRun) -> SimulationRun:
    """A queued run is cancelled at once; a running one stops within about a second, in a
    training or between two, and stores nothing: 'auto' keeps the evidence it had."""
    return run_cancel(run)


def simulation_run_retry(*, run: SimulationRun, user: User | None) -> SimulationRun:
    """A new run with the size, seeds and rounds of ``run``, which failed or was cancelled;
    it replays the project's newest snapshot then."""
    run_retry_check(run)
    return simulation_run_start(
        project=run.project,
        user=user,
        size=run.size,
        seeds=run.seeds,
        rounds=run.rounds,
        retry_of=run,
    )


# --- execute (worker side) ---------------------------------------------------------------


def simulation_run_execute(
    *, simulation_run_id: int, task_id: str = "", worker: str = ""
) -> SimulationRun | None:
    """Replay the project and store the evidence. Called by the ``prm_training.simulate``
    task; safe to call again for the same run (``services.runs``). Returns the run as it
    ended, or None when this call had nothing to do."""
    run = run_claim(
        SimulationRun, simulation_run_id, task_id=task_id, worker=worker, reset={"evidence": {}}
    )
    if run is None:
        return None
    work_dir = simulation_attempt_dir(run)
    try:
        with run_kept_alive(run):
            _simulate(run, work_dir)
    except RunCancelled:
        run_finish(run, status=RunStatus.CANCELLED)
    except ValidationError as exc:
        run_finish(run, status=RunStatus.FAILED, error="; ".join(exc.messages))
    except Exception as exc:  # noqa: BLE001 - any failure ends the run, the evidence stays
        logger.exception("Simulation run %s failed", run.pk)
        run_finish(run, status=RunStatus.FAILED, error=run_failure_detail(exc))
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    run.refresh_from_db()
    return run


def _simulate(run: SimulationRun, work_dir: Path) -> None:
    """The claimed run's work: the replay, each training counted in the ``simulating``
    phase, then the evidence stored on the loop settings in the transaction that ends the
    run, only while this attempt still owns it."""
    progress = RunProgress(run)
    progress(Phase("loading", 0, 0, detail="the project's newest snapshot"))
    sim = simulation_config(size=run.size, seeds=run.seeds, rounds=run.rounds)
    meter = PhaseMeter(progress)
    meter.start(
        "simulating",
        total=simulation_trainings(sim),
        unit="trainings",
        detail=f"{len(sim.strategies)} strategies x {len(sim.seeds)} seeds x {sim.rounds} rounds",
    )
    work_dir.mkdir(parents=True, exist_ok=True)
    replay = simulation_project_replay(
        project_id=run.project_id,
        sim=sim,
        prm=_prm_config(run),
        work_dir=work_dir,
        too_few_stored=True,
        progress=meter.tick,
        should_stop=progress.stop_requested,
    )
    progress(Phase("writing", 0, 0, detail="the evidence 'auto' reads"))
    with transaction.atomic():
        if run_finish(
            run,
            status=RunStatus.SUCCEEDED,
            evidence=replay.evidence,
            snapshot_version=replay.snapshot_version,
        ):
            simulation_evidence_store(project_id=run.project_id, evidence=replay.evidence)


def _prm_config(run: SimulationRun) -> PRMConfig:
    """The PRM each round trains: the project's automatic-run settings (its backbone
    resolved by name, as a training run's), the size's head epochs, the worker's feature
    cache, and the cancel flag read every CANCEL_CHECK_SECONDS."""
    from prm_training.ml.config import PRMConfig

    settings = dict(project_training_settings_get(project=run.project).default_config)
    settings["backbone"] = backbone_path(name=settings.get("backbone", ""), project=run.project)
    settings["cache_dir"] = str(feature_cache_dir())
    settings["report_every_s"] = CANCEL_CHECK_SECONDS
    if SIZES[run.size]["head_epochs"] is not None:
        settings["head_epochs"] = SIZES[run.size]["head_epochs"]
    settings.pop("zero_shot", None)
    return PRMConfig.from_dict({k: v for k, v in settings.items() if v != ""})
