"""Machine-label runs (issue 23): a causal LM from the backbone root, run by a GPU worker
with the lifecycle every run shares (``services.runs``: outbox, claim under a lock,
heartbeat, reaper, cancel, retry; ``services.progress``: phase, rate, cancel between items).

- ``sample``: N chains per chosen problem (``ml.sampling.sample_chains``), each split into
  steps with the project's splitter, its final answer graded against the problem's
  reference (``ml.grading``), imported through the import service (``chain_import``, so
  they are deduplicated and counted like any file) with their provenance: the model in
  ``Chain.generator``, the parameters, seed and run in ``Chain.meta["sampling"]``, the
  grade in ``Chain.meta["final_answer_correct"]`` (where ProcessBench's verdict lives).
- ``rollout``: per step of each chosen chain, Monte-Carlo values from rollouts of its
  prefix (``ml.rollouts``), written as ``MachineLabel(source=monte_carlo)`` as each step
  finishes; ``mode`` "search" probes by binary search for the first step from which no
  rollout reaches the answer and writes the probed steps, the first error marked.
- ``judge``: n critiques per chain (``ml.judge.judge_chain``), each kept with its raw text
  (``JudgeSample``; a text that cannot be parsed has a null verdict and is never a
  label), and labels from their majority: +1 before the named step, -1 at it, none after;
  -1 (no wrong step) labels every step +1.

Resumable: a redelivered task or a takeover after a lost worker starts from what the run
stored. A sampling run skips the problems it already imported chains for; a rollout run
hands the values it stored to the search as ``done``, so no stored rollout is repeated; a
judge run skips the chains it stored samples for (a chain's samples and labels are
written in one transaction).

This module is the web side: what a run may ask (models, parameters, items) and starting,
cancelling and retrying one. The worker side is ``machine_label_work``
(``machine_label_run_execute``) with one module per kind (``machine_label_sampling``,
``machine_label_rollouts``, ``machine_label_judge``); it loads the model and the ML
package inside the run, so the web process imports none of it."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet

from annotation.models import Chain, MachineLabel, MachineSource, Problem, Project
from prm_training.ml.generation import SamplingParams
from prm_training.models import MachineLabelRun, MachineLabelRunKind
from prm_training.selectors import project_training_settings_get
from prm_training.services.backbones import (
    BUNDLED,
    REFUSED,
    VERSION_PREFIX,
    BackboneChoice,
    backbone_choices,
    backbone_path,
)
from prm_training.services.runs import (
    run_admission_check,
    run_cancel,
    run_enqueue_on_commit,
    run_retry_check,
)

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

# The most problems or chains one run works through.
MAX_ITEMS = 10_000
ROLLOUT_MODES = ("full", "search")
# What a run may choose instead of ids: every item, or those not yet done by any run.
FILTERS: dict[str, tuple[str, ...]] = {
    MachineLabelRunKind.SAMPLE: ("all", "without_chains"),
    MachineLabelRunKind.ROLLOUT: ("all", "without_labels"),
    MachineLabelRunKind.JUDGE: ("all", "without_labels"),
}
# Bounds of the sampling parameters (the API states the same).
PARAM_BOUNDS: dict[str, tuple[float, float]] = {
    "n": (1, 64),
    "temperature": (0.0, 5.0),
    "top_p": (0.01, 1.0),
    "max_new_tokens": (1, 8192),
    "seed": (0, 2**31 - 1),
}
# Problems sampled per call of the engine: a sampling run imports after each group.
SAMPLE_GROUP = 8
SOURCE_OF_KIND: dict[str, str] = {
    MachineLabelRunKind.ROLLOUT: MachineSource.MONTE_CARLO,
    MachineLabelRunKind.JUDGE: MachineSource.JUDGE,
}


# --- start, cancel, retry ----------------------------------------------------------------


def machine_label_model_check(*, name: str, project: Project) -> str:
    """The directory of causal LM ``name`` under the backbone root; raises
    ValidationError({"model": ...}) for anything else (the bundled encoder, a version's
    fine-tuned backbone, a model that declares no language-model head)."""
    name = name.strip()
    if not name or name.startswith(VERSION_PREFIX):
        raise ValidationError({"model": REFUSED})
    try:
        path = backbone_path(name=name, project=project)
    except ValidationError:
        raise ValidationError({"model": REFUSED}) from None
    if not _declares_causal_lm(Path(path)):
        raise ValidationError({"model": f"{name} is not a causal language model."})
    return path


def _declares_causal_lm(path: Path) -> bool:
    """Whether the model directory's config names a language-model head (or names no
    architecture at all, so the load decides)."""
    try:
        declared = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return False
    architectures = declared.get("architectures") if isinstance(declared, dict) else None
    return not architectures or any(
        str(arch).endswith(("ForCausalLM", "LMHeadModel")) for arch in architectures
    )


def machine_label_model_choices(*, project: Project) -> list[BackboneChoice]:
    """The causal LMs a machine-label run of ``project`` may name (the ML page's list)."""
    return [
        choice
        for choice in backbone_choices(project=project)
        if choice.name != BUNDLED
        and not choice.name.startswith(VERSION_PREFIX)
        and _declares_causal_lm(Path(backbone_path(name=choice.name, project=project)))
    ]


def machine_label_params_clean(
    *, kind: str, params: dict[str, Any], project: Project
) -> dict[str, Any]:
    """The run's stored parameters: SamplingParams fields within PARAM_BOUNDS (the
    defaults where not given), ``mode`` for a rollout run, and for a judge run the
    template (the one given, else the project's, else ProcessBench's). Raises
    ValidationError naming every bad field."""
    defaults = SamplingParams().as_dict()
    errors: dict[str, list[str]] = {}
    allowed = {*defaults, "mode", "budget", "template"}
    for key in params:
        if key not in allowed:
            errors[key] = ["Not a parameter of a machine-label run."]
    clean: dict[str, Any] = {}
    for name, default in defaults.items():
        value = params.get(name, default)
        low, high = PARAM_BOUNDS[name]
        if isinstance(value, bool) or not isinstance(value, int | float):
            errors[name] = ["Must be a number."]
            continue
        if isinstance(default, int) and not float(value).is_integer():
            errors[name] = ["Must be an integer."]
            continue
        if not low <= value <= high:
            errors[name] = [f"Must be between {low:g} and {high:g}."]
            continue
        clean[name] = type(default)(value)
    if kind == MachineLabelRunKind.ROLLOUT:
        mode = params.get("mode", "full")
        if mode not in ROLLOUT_MODES:
            errors["mode"] = [f"Must be one of: {', '.join(ROLLOUT_MODES)}."]
        clean["mode"] = mode
        budget = params.get("budget")
        if budget is not None:
            if mode != "search":
                errors["budget"] = ["A rollout budget bounds the search mode only."]
            elif (
                isinstance(budget, bool)
                or not isinstance(budget, int)
                or budget < clean.get("n", 1)
            ):
                errors["budget"] = ["Must be a whole number of rollouts, at least n."]
            else:
                clean["budget"] = budget
    elif "mode" in params:
        errors["mode"] = ["Only a rollout run has a mode."]
    if "budget" in params and kind != MachineLabelRunKind.ROLLOUT:
        errors["budget"] = ["Only a rollout run has a budget."]
    if kind == MachineLabelRunKind.JUDGE:
        template = params.get("template") or judge_template_of(project=project)
        problem = judge_template_problem(template)
        if problem:
            errors["template"] = [problem]
        clean["template"] = template
    elif "template" in params:
        errors["template"] = ["Only a judge run has a template."]
    if errors:
        raise ValidationError(errors)
    return clean


def judge_template_problem(template: object) -> str:
    """What is wrong with a judge template ("" when nothing is): it names
    ``{tagged_response}`` (the tagged steps) once and may name ``{problem}`` once, with
    ``{{`` and ``}}`` for braces, and nothing else: no format spec, conversion, index or
    attribute (``ml.judge.template_fields``). It is only read here, never filled."""
    from prm_training.ml.judge import template_fields

    if not isinstance(template, str) or not template.strip():
        return "Must be a non-empty text."
    try:
        fields = template_fields(template)
    except ValueError as exc:
        return (
            "Must name only {problem} and {tagged_response}, each once and alone, with "
            f"{{{{ and }}}} for braces ({exc})."
        )
    if "tagged_response" not in fields:
        return "Must hold {tagged_response}, where the steps go."
    return ""


def judge_template_of(*, project: Project) -> str:
    """The template a judge run of ``project`` sends: the project's, else ProcessBench's."""
    from prm_training.ml.judge import DEFAULT_TEMPLATE

    stored = project_training_settings_get(project=project).judge_template
    return stored if stored.strip() else DEFAULT_TEMPLATE


def _items_of(*, kind: str, project: Project) -> QuerySet[Any]:
    if kind == MachineLabelRunKind.SAMPLE:
        return Problem.objects.filter(project=project)
    return Chain.objects.filter(project=project)


def machine_label_items_resolve(
    *, kind: str, project: Project, ids: Sequence[int] | None, filter: str | None
) -> list[int]:
    """The problems (sample) or chains (rollout, judge) a run works through: ``ids``, all
    of them in ``project``, or those ``filter`` names (FILTERS); a rollout run needs a
    reference answer to grade against, so its chains are those whose problem has one.
    Raises ValidationError when both or neither are given, an id is not in the project,
    nothing is left, or more than MAX_ITEMS are."""
    noun = "problems" if kind == MachineLabelRunKind.SAMPLE else "chains"
    if (ids is None) == (filter is None):
        raise ValidationError({noun: [f"Name the {noun} by id, or a filter (not both)."]})
    items = _items_of(kind=kind, project=project)
    if ids is not None:
        wanted = list(dict.fromkeys(int(i) for i in ids))
        found = set(items.filter(pk__in=wanted).values_list("pk", flat=True))
        missing = [i for i in wanted if i not in found]
        if missing:
            shown = ", ".join(map(str, missing[:10]))
            raise ValidationError({noun: [f"Not {noun} of this project: {shown}."]})
        if kind == MachineLabelRunKind.ROLLOUT:
            unreferenced = list(
                items.filter(pk__in=wanted, problem__reference_answer="").values_list(
                    "pk", flat=True
                )[:10]
            )
            if unreferenced:
                raise ValidationError(
                    {
                        noun: [
                            "Their problem has no reference answer to grade rollouts "
                            f"against: {', '.join(map(str, unreferenced))}."
                        ]
                    }
                )
        chosen = wanted
    else:
        if filter not in FILTERS[kind]:
            raise ValidationError({"filter": [f"Must be one of: {', '.join(FILTERS[kind])}."]})
        if filter == "without_chains":
            items = items.exclude(Exists(Chain.objects.filter(problem=OuterRef("pk"))))
        elif filter == "without_labels":
            source = SOURCE_OF_KIND[kind]
            labeled = MachineLabel.objects.filter(chain=OuterRef("pk"), source=source)
            items = items.exclude(Exists(labeled))
        if kind == MachineLabelRunKind.ROLLOUT:
            items = items.exclude(problem__reference_answer="")
        chosen = list(items.order_by("pk").values_list("pk", flat=True)[: MAX_ITEMS + 1])
    if not chosen:
        raise ValidationError({noun: [f"No {noun} to work on."]})
    if len(chosen) > MAX_ITEMS:
        raise ValidationError({noun: [f"More than {MAX_ITEMS:,} {noun}: choose fewer."]})
    return chosen


def machine_label_run_start(
    *,
    project: Project,
    user: User | None,
    kind: str,
    model: str,
    params: dict[str, Any] | None = None,
    ids: Sequence[int] | None = None,
    filter: str | None = None,
    retry_of: MachineLabelRun | None = None,
) -> MachineLabelRun:
    """Create a QUEUED run of ``kind`` with causal LM ``model`` (a name under the backbone
    root) on the items ``ids`` or ``filter`` name (``machine_label_items_resolve``), and
    enqueue it once committed. Raises ValidationError naming every bad field."""
    if kind not in MachineLabelRunKind.values:
        raise ValidationError({"kind": [f"Must be one of: {', '.join(MachineLabelRunKind)}."]})
    errors: dict[str, list[str]] = {}
    clean: dict[str, Any] = {}
    item_ids: list[int] = []
    try:
        machine_label_model_check(name=model, project=project)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    try:
        clean = machine_label_params_clean(kind=kind, params=dict(params or {}), project=project)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    try:
        item_ids = machine_label_items_resolve(kind=kind, project=project, ids=ids, filter=filter)
    except ValidationError as exc:
        errors.update(exc.message_dict)
    if errors:
        raise ValidationError(errors)
    selection: dict[str, Any] = {"ids": list(ids)} if ids is not None else {"filter": filter}
    with transaction.atomic():
        run_admission_check(MachineLabelRun, project_id=project.pk)
        run = MachineLabelRun.objects.create(
            project=project,
            kind=kind,
            model_name=model.strip(),
            params=clean,
            selection=selection,
            item_ids=item_ids,
            items_total=len(item_ids),
            started_by=user if user is not None and user.is_authenticated else None,
            retry_of=retry_of,
        )
        run_enqueue_on_commit(run)
    return run


def machine_label_run_cancel(*, run: MachineLabelRun) -> MachineLabelRun:
    """A queued run is cancelled at once; a running one stops between two items (within
    about a second of the item it is on) and keeps what it stored."""
    return run_cancel(run)


def machine_label_run_retry(*, run: MachineLabelRun, user: User | None) -> MachineLabelRun:
    """A new run with the kind, model, parameters and items of ``run``, which failed or
    was cancelled. It starts afresh: what ``run`` stored stays under ``run``."""
    run_retry_check(run)
    with transaction.atomic():
        run_admission_check(MachineLabelRun, project_id=run.project_id)
        retry = MachineLabelRun.objects.create(
            project=run.project,
            kind=run.kind,
            model_name=run.model_name,
            params=run.params,
            selection=run.selection,
            item_ids=run.item_ids,
            items_total=run.items_total,
            started_by=user if user is not None and user.is_authenticated else None,
            retry_of=run,
        )
        run_enqueue_on_commit(retry)
    return retry
