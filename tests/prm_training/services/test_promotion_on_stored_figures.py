"""Promotion decides on the figures that were stored, not on those measured: a training
run measures its new version on the evaluation sets, then publishes; when a lead changes
a set's chains in between, the write refuses the figures of the old chains, and a
version promoted on them would stand on figures nobody can read. The interleaving is
reproduced in order: figures measured, the set changed, the version published."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from annotation.datasets.evaluation_sets import (
    chains_evaluation_set_add,
    evaluation_set_mark_chains,
)
from prm_training.models import (
    EvaluationResult,
    EvaluationRun,
    ModelVersion,
    ProjectTrainingSettings,
    RunStatus,
    TrainingRun,
)
from prm_training.services.evaluation import SetFigures
from prm_training.services.model_versions import model_version_activate, training_run_publish
from prm_training.services.training_progress import TrainingReporter
from tests.factories import ChainFactory

pytestmark = pytest.mark.django_db


def _measured(project: Any, tmp_path: Path) -> tuple[Any, list[int], SetFigures]:
    """The project under the rule "no loss on any evaluation set", a set "held" of two
    chains (a third chain beside it), and a version's winning figures measured there."""
    ProjectTrainingSettings.objects.create(project=project, promotion_needs_evaluation_sets=True)
    chains = [ChainFactory(project=project).pk for _ in range(3)]
    held = evaluation_set_mark_chains(project=project, chain_ids=chains[:2], name="held")
    figures = SetFigures(
        evaluation_set_id=held.pk,
        name="held",
        chains=2,
        unlabeled_chains=0,
        loses=False,
        members=frozenset(chains[:2]),
    )
    return held, chains, figures


def _publish(project: Any, tmp_path: Path, figures: list[SetFigures]) -> TrainingRun:
    """A training run of ``project`` publishing its version (none is active, so it would
    be made active but for the evaluation set rule) with ``figures``."""
    run = TrainingRun.objects.create(project=project, status=RunStatus.RUNNING, attempts=1)
    result = SimpleNamespace(metrics={}, checkpoint_dir=tmp_path, heldout_scores=[], readout=None)
    return training_run_publish(
        run=run,
        snapshot=None,
        result=result,
        heldout=[],
        reporter=TrainingReporter(run),
        figures=figures,
    )


def test_a_version_is_promoted_on_figures_stored_for_the_sets_chains(
    project: Any, tmp_path: Path
) -> None:
    # Given figures measured on the set's chains as they still are
    held, _, figures = _measured(project, tmp_path)
    # When the version is published
    run = _publish(project, tmp_path, [figures])
    # Then they are stored and it is active on them
    version = ModelVersion.objects.get(training_run=run)
    assert version.is_active, run.activation_note
    assert EvaluationResult.objects.filter(model_version=version, evaluation_set=held).exists()
    assert "Measured on 1 evaluation set(s)." in run.activation_note


def test_figures_refused_after_the_set_changed_promote_nothing(
    project: Any, tmp_path: Path
) -> None:
    # Given figures measured on the set's two chains
    held, chains, figures = _measured(project, tmp_path)
    # When a lead puts the third chain into the set before the version is published
    chains_evaluation_set_add(project=project, chain_ids=chains[2:], evaluation_set=held)
    run = _publish(project, tmp_path, [figures])

    # Then the figures of the old chains were not stored, and the version is not active
    version = ModelVersion.objects.get(training_run=run)
    assert not EvaluationResult.objects.filter(model_version=version).exists()
    assert not version.is_active and version.activated_at is None
    # The run says why on the ML page: its figures were refused, and it waits to be measured
    assert "Its figures on held were not stored" in run.activation_note
    assert "has no figures against a baseline on evaluation set(s) held" in run.activation_note
    assert "Measured on" not in run.activation_note
    # And an evaluation run waits to measure it on the set as it is now
    assert EvaluationRun.objects.filter(project=project, status=RunStatus.QUEUED).exists()

    # When that run has stored figures of the three chains, ML staff may activate it
    EvaluationResult.objects.create(model_version=version, evaluation_set=held, loses=False)
    assert model_version_activate(model_version=version, user=None).is_active


def test_with_the_rule_off_a_refused_figure_is_only_noted(project: Any, tmp_path: Path) -> None:
    held, chains, figures = _measured(project, tmp_path)
    ProjectTrainingSettings.objects.filter(project=project).update(
        promotion_needs_evaluation_sets=False
    )
    chains_evaluation_set_add(project=project, chain_ids=chains[2:], evaluation_set=held)
    run = _publish(project, tmp_path, [figures])
    assert ModelVersion.objects.get(training_run=run).is_active
    assert "Its figures on held were not stored" in run.activation_note
