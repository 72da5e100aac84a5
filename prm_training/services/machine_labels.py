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

The worker loads the model and the ML package inside ``machine_label_run_execute``; the
web process imports none of it."""

from __future__ import annotations

import hashlib
import io
import json
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet

from annotation.datasets.importers.generic import split_steps
from annotation.datasets.imports import ImportRejected, chain_import
from annotation.models import Chain, MachineLabel, MachineSource, Problem, Project, Step
from annotation.routing.services import chains_route_enqueue_on_commit
from prm_training.ml.generation import Completion, SamplingParams
from prm_training.ml.progress import Phase, PhaseMeter, RunCancelled
from prm_training.models import JudgeSample, MachineLabelRun, MachineLabelRunKind, RunStatus
from prm_training.selectors import project_training_settings_get
from prm_training.services.backbones import (
    BUNDLED,
    REFUSED,
    VERSION_PREFIX,
    BackboneChoice,
    backbone_choices,
    backbone_path,
)
from prm_training.services.progress import RunProgress, run_kept_alive
from prm_training.services.runs import (
    run_cancel,
    run_claim,
    run_enqueue_on_commit,
    run_failure_detail,
    run_finish,
    run_heartbeat,
    run_retry_check,
)

if TYPE_CHECKING:
    from prm_training.ml.generation import GenerationEngine
    from prm_training.ml.rollouts import StepValue

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
    """What is wrong with a judge template ("" when nothing is): it is filled by
    ``str.format`` with ``{problem}`` and ``{tagged_response}`` (the tagged steps), so
    any other field, or a lone brace, is an error (write ``{{}}`` for a brace)."""
    from prm_training.ml.judge import judge_prompt

    if not isinstance(template, str) or not template.strip():
        return "Must be a non-empty text."
    try:
        judge_prompt(template, "problem", ["step"])
    except (KeyError, IndexError, ValueError) as exc:
        return (
            "Must fill only {problem} and {tagged_response}, with {{ and }} for braces "
            f"({type(exc).__name__}: {exc})."
        )
    if "{tagged_response}" not in template:
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


# --- execute (worker side) ---------------------------------------------------------------


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


@dataclass
class _Counted:
    """The engine the run generates with, counting completions and tokens for the row."""

    engine: GenerationEngine
    completions: int = 0
    tokens: int = 0
    model_name: str = ""

    def __post_init__(self) -> None:
        self.model_name = self.engine.model_name

    def __getattr__(self, name: str) -> Any:
        # What else the engine offers (an instruction model's ``chat_prompt``, which the
        # judge looks for) passes through.
        if name == "engine":
            raise AttributeError(name)
        return getattr(self.engine, name)

    def generate(self, prompts: Sequence[str], params: SamplingParams) -> list[list[Completion]]:
        out = self.engine.generate(prompts, params)
        for completions in out:
            self.completions += len(completions)
            self.tokens += sum(completion.tokens for completion in completions)
        return out


class _Report:
    """The run's progress: the phase through ``RunProgress`` (rate, ETA, cancel flag),
    the counts on the row's own columns in the same writes."""

    def __init__(self, run: MachineLabelRun, engine: _Counted, progress: RunProgress) -> None:
        self.run = run
        self.engine = engine
        self.progress = progress
        self.meter = PhaseMeter(progress)
        self.done = 0

    def start(self, *, done: int, unit: str, detail: str) -> None:
        self.done = done
        self.meter.start("generating", total=self.run.items_total, unit=unit, detail=detail)
        self.meter.set(done)
        self.flush()

    def item_done(self) -> None:
        self.done += 1
        self.progress.note(**self.counts())
        self.meter.set(self.done)

    def check(self) -> None:
        """Raise RunCancelled where the run is to stop (between two items, or two steps)."""
        self.progress.check()

    def flush(self) -> None:
        self.progress.note(**self.counts())
        self.progress.flush()

    def counts(self) -> dict[str, int]:
        return {
            "items_done": self.done,
            "completions": self.run.completions + self.engine.completions,
            "tokens": self.run.tokens + self.engine.tokens,
        }


def _execute(run: MachineLabelRun, engine: GenerationEngine | None) -> None:
    counted = _Counted(engine) if engine is not None else None
    progress = RunProgress(run)
    progress(Phase("loading", 0, 0, detail=run.model_name))
    if counted is None:
        from prm_training.ml.generation import engine_load

        model_dir = machine_label_model_check(name=run.model_name, project=run.project)
        counted = _Counted(engine_load(model_dir))
    report = _Report(run, counted, progress)
    params = SamplingParams(**{k: v for k, v in run.params.items() if k in _PARAM_NAMES})
    work = {
        MachineLabelRunKind.SAMPLE: _sample,
        MachineLabelRunKind.ROLLOUT: _rollout,
        MachineLabelRunKind.JUDGE: _judge,
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


def config_hash(run: MachineLabelRun) -> str:
    """The digest a rollout run's labels carry: its model and every parameter, so labels
    of two runs compare only where they were made the same way."""
    payload = {"model": run.model_name, **run.params}
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


# --- sample ------------------------------------------------------------------------------


def _sample(
    run: MachineLabelRun, engine: _Counted, params: SamplingParams, report: _Report
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


# --- rollout -----------------------------------------------------------------------------


def _rollout(
    run: MachineLabelRun, engine: _Counted, params: SamplingParams, report: _Report
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


# --- judge -------------------------------------------------------------------------------


def _judge(
    run: MachineLabelRun, engine: _Counted, params: SamplingParams, report: _Report
) -> dict[str, Any]:
    from prm_training.ml.judge import judge_chain, template_hash

    template = run.params["template"]
    digest = template_hash(template)
    judged = set(JudgeSample.objects.filter(run=run).values_list("chain_id", flat=True))
    chains = {c.pk: c for c in Chain.objects.filter(pk__in=run.item_ids).select_related("problem")}
    report.start(done=len(judged), unit="chains", detail=f"{params.n} samples per chain")
    for chain_id in run.item_ids:
        chain = chains.get(chain_id)
        if chain_id in judged:
            continue
        if chain is None:
            report.item_done()
            continue
        report.check()
        steps = list(Step.objects.filter(chain=chain).order_by("index"))
        verdict = judge_chain(engine, template, chain.problem.text, [s.text for s in steps], params)
        report.check()
        with transaction.atomic():
            JudgeSample.objects.bulk_create(
                [
                    JudgeSample(run=run, chain=chain, sample_index=index, text=text, verdict=parsed)
                    for index, (text, parsed) in enumerate(
                        zip(verdict.texts, verdict.verdicts, strict=True)
                    )
                ],
                ignore_conflicts=True,
            )
            MachineLabel.objects.bulk_create(
                _judge_labels(run, chain, steps, verdict.verdicts, verdict.majority, digest),
                ignore_conflicts=True,
            )
        report.item_done()
    samples = JudgeSample.objects.filter(run=run)
    return {
        "samples": samples.count(),
        "unparsed": samples.filter(verdict__isnull=True).count(),
        "labels": MachineLabel.objects.filter(
            run_kind=MachineLabelRunKind.JUDGE, run_id=run.pk
        ).count(),
    }


def _judge_labels(
    run: MachineLabelRun,
    chain: Chain,
    steps: list[Step],
    verdicts: Sequence[int | None],
    majority: int | None,
    digest: str,
) -> list[MachineLabel]:
    """Labels from the judges' majority: +1 before the step it names, -1 at it, none
    after it; -1 (no wrong step) labels every step +1; no majority, or one naming no step
    of the chain, labels nothing. ``confidence`` is the share of parsed samples that
    agree with it."""
    if majority is None or not -1 <= majority < len(steps):
        return []
    parsed = [v for v in verdicts if v is not None]
    votes = Counter(parsed)
    detail = {
        "samples": len(verdicts),
        "unparsed": len(verdicts) - len(parsed),
        "votes": {str(k): n for k, n in sorted(votes.items())},
        "majority": majority,
    }
    confidence = votes[majority] / len(parsed) if parsed else None
    last = len(steps) - 1 if majority == -1 else majority
    return [
        MachineLabel(
            project_id=run.project_id,
            chain=chain,
            step=step,
            source=MachineSource.JUDGE,
            rating=-1 if step.index == majority else 1,
            confidence=confidence,
            detail=detail,
            model=run.model_name,
            config_hash=digest,
            run_kind=MachineLabelRunKind.JUDGE,
            run_id=run.pk,
        )
        for step in steps
        if step.index <= last
    ]
