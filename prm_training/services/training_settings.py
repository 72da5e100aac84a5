"""The settings of training: what a run may set and the node's limits on it
(``training_config_clean``, shared by the API, the admin and every start), and the
project's loop settings (acquisition strategy, random share, automatic retraining)."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.db import transaction

from annotation.models import Project
from prm_training.ml.config import run_settings
from prm_training.models import ProjectTrainingSettings
from prm_training.services.autostart import autostart_setting_forget
from prm_training.services.backbones import backbone_path
from prm_training.services.machine_labels import judge_template_problem

logger = logging.getLogger(__name__)


# The PRMConfig fields a run may set, with their bounds, from the fields' metadata. The
# config module is torch-free; the worker builds the PRMConfig from the checked settings and
# the ML package's defaults fill in the rest.
CONFIG_FIELDS = run_settings()


@dataclass(frozen=True)
class NodeLimit:
    """The most of one training setting this node can give a run
    (``settings.STEPLAB_TRAINING_LIMITS``), and the environment variable that sets it."""

    value: int
    variable: str

    def __str__(self) -> str:
        return (
            f"Must be at most {self.value:,}: this node's limit ({self.variable}; ask an "
            "administrator to raise it if the node can give more)."
        )


def node_limits() -> dict[str, NodeLimit]:
    """The node's limit of each bounded training setting, by setting name."""
    return {
        name: NodeLimit(value=value, variable=variable)
        for name, (value, variable) in django_settings.STEPLAB_TRAINING_LIMITS.items()
    }


def training_config_clean(*, config: Mapping[str, Any], project: Project) -> dict[str, Any]:
    """``config`` with only known PRMConfig fields, each of the right type and in range,
    and a ``backbone`` that ``project``'s runs may name (``services.backbones``: a name,
    never a path). What the node gives a run (processes, batch, window, epochs,
    ensemble) is bounded by ``node_limits``, so a run asking more is refused here, naming
    the limit, before it is queued. Raises ValidationError naming every bad field."""
    errors: dict[str, list[str]] = {}
    cleaned: dict[str, Any] = {}
    for name, value in config.items():
        spec = CONFIG_FIELDS.get(name)
        if spec is None:
            errors.setdefault(name, []).append("Unknown training setting.")
            continue
        if value is None:
            continue
        if spec.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not _of_kind(value, spec.kind):
            errors.setdefault(name, []).append(f"Must be a {spec.kind.__name__}.")
            continue
        if spec.kind is float and not math.isfinite(value):
            errors.setdefault(name, []).append("Must be a finite number.")
            continue
        if spec.choices is not None and value not in spec.choices:
            errors.setdefault(name, []).append(f"Must be one of: {', '.join(spec.choices)}.")
            continue
        if spec.low is not None and value < spec.low:
            errors.setdefault(name, []).append(f"Must be at least {spec.low:g}.")
            continue
        if spec.high is not None and value > spec.high:
            errors.setdefault(name, []).append(f"Must be at most {spec.high:g}.")
            continue
        node_limit = node_limits().get(name)
        if node_limit is not None and value > node_limit.value:
            errors.setdefault(name, []).append(str(node_limit))
            continue
        if spec.max_length is not None and len(value) > spec.max_length:
            errors.setdefault(name, []).append(f"At most {spec.max_length} characters.")
            continue
        if name == "backbone":
            value = value.strip()
            try:
                backbone_path(name=value, project=project)
            except ValidationError as exc:
                errors.setdefault(name, []).extend(exc.messages)
                continue
        cleaned[name] = value
    if cleaned.get("zero_shot") and not errors:
        errors.update(_zero_shot_errors(cleaned))
    if errors:
        raise ValidationError(errors)
    return cleaned


def _zero_shot_errors(cleaned: Mapping[str, Any]) -> dict[str, list[str]]:
    """What a zero-shot run's settings lack (``PRMConfig.zero_shot``), said before it is
    queued rather than by the worker: the backbone's own step head, read in frozen_head
    mode. Whether the named backbone has a step head the worker finds out on loading it."""
    if not cleaned.get("step_prior"):
        return {"zero_shot": ["Needs step_prior: an open PRM whose model scores steps."]}
    if cleaned.get("mode") == "full":
        return {"zero_shot": ["Trains nothing: leave mode at frozen_head."]}
    return {}


LOOP_FIELDS = (
    "acquisition_strategy",
    "random_fraction",
    "retrain_every_n_finished",
    "promotion_needs_evaluation_sets",
    "judge_template",
)


def _of_kind(value: Any, kind: type) -> bool:
    """Whether ``value`` is a ``kind`` (a bool is not an int or a float here)."""
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def project_training_settings_update(
    *, project: Project, data: Mapping[str, Any]
) -> ProjectTrainingSettings:
    """Change the project's loop settings (ML staff): any of ``LOOP_FIELDS`` and
    ``default_config`` (the PRMConfig fields automatic runs use, checked like a run's
    settings and replaced whole). Fields left out keep their values. Raises
    ValidationError naming every bad field; the row is created on first change."""
    unknown = sorted(set(data) - {*LOOP_FIELDS, "default_config"})
    if unknown:
        raise ValidationError({name: "Unknown setting." for name in unknown})
    with transaction.atomic():
        loop, _ = ProjectTrainingSettings.objects.select_for_update().get_or_create(project=project)
        for name in LOOP_FIELDS:
            if name in data:
                setattr(loop, name, data[name])
        if "judge_template" in data and str(data["judge_template"]).strip():
            problem = judge_template_problem(data["judge_template"])
            if problem:
                raise ValidationError({"judge_template": problem})
        if "default_config" in data:
            config = data["default_config"] or {}
            if not isinstance(config, Mapping):
                raise ValidationError({"default_config": "Must be an object."})
            try:
                loop.default_config = training_config_clean(config=config, project=project)
            except ValidationError as exc:
                raise ValidationError(
                    {"default_config": [f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items()]}
                ) from None
        loop.full_clean(exclude=["project"])
        loop.save()
    autostart_setting_forget(project_id=project.pk)
    return loop
