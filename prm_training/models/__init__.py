"""The PRM half of the loop's data, one module per subject: the lifecycle every run shares
(``runs``), the project's loop settings (``loop``), training runs and the model versions
they publish (``training``), versions' figures on evaluation sets and the runs that fill
them (``evaluation``), scoring runs and their chain scores (``scoring``), simulation runs
(``simulation``), machine-label runs and a judge's samples (``machine_labels``). Every
other module imports them from here.

Rows here are written only by ``prm_training.services``; nothing in ``save()`` or a signal
starts work (a saved label never trains a model by itself)."""

from prm_training.models.evaluation import EvaluationResult, EvaluationRun, EvaluationTrigger
from prm_training.models.loop import (
    AUTO_STRATEGY,
    STRATEGY_SETTINGS,
    AcquisitionStrategy,
    ProjectTrainingSettings,
)
from prm_training.models.machine_labels import JudgeSample, MachineLabelRun, MachineLabelRunKind
from prm_training.models.runs import FINISHED_STATUSES, RunLifecycle, RunStatus
from prm_training.models.scoring import ChainScore, ScoringRun, chain_aggregates
from prm_training.models.simulation import SimulationRun, SimulationSize
from prm_training.models.training import ModelVersion, RunTrigger, TrainingRun

__all__ = [
    "AUTO_STRATEGY",
    "FINISHED_STATUSES",
    "STRATEGY_SETTINGS",
    "AcquisitionStrategy",
    "ChainScore",
    "EvaluationResult",
    "EvaluationRun",
    "EvaluationTrigger",
    "JudgeSample",
    "MachineLabelRun",
    "MachineLabelRunKind",
    "ModelVersion",
    "ProjectTrainingSettings",
    "RunLifecycle",
    "RunStatus",
    "RunTrigger",
    "ScoringRun",
    "SimulationRun",
    "SimulationSize",
    "TrainingRun",
    "chain_aggregates",
]
