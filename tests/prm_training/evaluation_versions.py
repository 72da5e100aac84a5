"""Stored model versions for the evaluation-run tests that need no trained checkpoint: a
version with its own snapshot, its checkpoint a folder that exists or not."""

from __future__ import annotations

from typing import Any

from annotation.models import Snapshot
from prm_training.models import ModelVersion, RunStatus, TrainingRun


def stored_version(
    project: Any, number: int, *, checkpoint_dir: str = "/nonexistent", snapshot: bool = True
) -> ModelVersion:
    """Version ``number`` of ``project``, published by a succeeded run, with snapshot
    ``v<number>`` (none without ``snapshot``) and ``checkpoint_dir`` (absent by default)."""
    return ModelVersion.objects.create(
        project=project,
        training_run=TrainingRun.objects.create(project=project, status=RunStatus.SUCCEEDED),
        snapshot=(
            Snapshot.objects.create(project=project, version=number, content_hash=f"s{number}")
            if snapshot
            else None
        ),
        version=number,
        checkpoint_dir=checkpoint_dir,
        metrics={},
    )
