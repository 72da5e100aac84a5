"""Read paths of the PRM loop, with the access rule of invariant 6: only ML staff train,
activate and score; leads may follow runs and read versions; a project the caller does not
belong to is a 404 (through ``project_get_for_member``), whatever the object."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.contrib.auth.models import AnonymousUser, User
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.db.models import Max, Model, QuerySet
from django.http import Http404
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from annotation.access import project_get_for_member
from annotation.models import Annotation, Chain, EvaluationSet, Project, Role
from prm_training.models import (
    FINISHED_STATUSES,
    EvaluationResult,
    EvaluationRun,
    JudgeSample,
    MachineLabelRun,
    ModelVersion,
    ProjectTrainingSettings,
    RunLifecycle,
    ScoringRun,
    SimulationRun,
    TrainingRun,
)

ML_ONLY: tuple[str, ...] = (Role.ML,)
ML_AND_LEADS: tuple[str, ...] = (Role.ML, Role.LEAD)

M = TypeVar("M", bound=Model)


def _get_for_member(
    *,
    queryset: QuerySet[M],
    object_id: int | str,
    user: User | AnonymousUser,
    roles: Iterable[str],
) -> M:
    try:
        obj = queryset.get(pk=int(object_id))
    except (ObjectDoesNotExist, ValueError, TypeError):
        raise Http404("Not found.") from None
    # Http404 for a non-member (the object's existence stays hidden), 403 for a wrong role.
    project_get_for_member(user=user, project_id=obj.project_id, roles=roles)  # type: ignore[attr-defined]
    return obj


def training_run_get_for_member(
    *,
    user: User | AnonymousUser,
    run_id: int | str,
    roles: Iterable[str] = ML_AND_LEADS,
) -> TrainingRun:
    return _get_for_member(
        queryset=TrainingRun.objects.select_related("started_by", "model_version"),
        object_id=run_id,
        user=user,
        roles=roles,
    )


def model_version_get_for_member(
    *,
    user: User | AnonymousUser,
    version_id: int | str,
    roles: Iterable[str] = ML_AND_LEADS,
) -> ModelVersion:
    return _get_for_member(
        queryset=ModelVersion.objects.all(), object_id=version_id, user=user, roles=roles
    )


def scoring_run_get_for_member(
    *,
    user: User | AnonymousUser,
    scoring_run_id: int | str,
    roles: Iterable[str] = ML_AND_LEADS,
) -> ScoringRun:
    return _get_for_member(
        queryset=ScoringRun.objects.select_related("model_version"),
        object_id=scoring_run_id,
        user=user,
        roles=roles,
    )


def simulation_run_get_for_member(
    *,
    user: User | AnonymousUser,
    simulation_run_id: int | str,
    roles: Iterable[str] = ML_AND_LEADS,
) -> SimulationRun:
    return _get_for_member(
        queryset=SimulationRun.objects.select_related("started_by"),
        object_id=simulation_run_id,
        user=user,
        roles=roles,
    )


def simulation_run_list(*, project: Project) -> QuerySet[SimulationRun]:
    return SimulationRun.objects.filter(project=project).select_related("started_by")


def machine_label_run_get_for_member(
    *,
    user: User | AnonymousUser,
    machine_label_run_id: int | str,
    roles: Iterable[str] = ML_AND_LEADS,
) -> MachineLabelRun:
    return _get_for_member(
        queryset=MachineLabelRun.objects.select_related("started_by"),
        object_id=machine_label_run_id,
        user=user,
        roles=roles,
    )


def machine_label_run_list(*, project: Project) -> QuerySet[MachineLabelRun]:
    return MachineLabelRun.objects.filter(project=project).select_related("started_by")


def judge_samples_page(
    *,
    run: MachineLabelRun,
    chain_id: int | None,
    unparsed: bool | None,
    after: int | None,
    limit: int,
) -> list[JudgeSample]:
    """A page of ``run``'s samples in the order they were stored: of one chain of the
    run's project (ValidationError naming ``chain`` for any other), only unparsed ones
    (``unparsed``) or only parsed ones (False), after the sample id ``after``."""
    samples = JudgeSample.objects.filter(run=run).order_by("id")
    if chain_id is not None:
        if not Chain.objects.filter(pk=chain_id, project_id=run.project_id).exists():
            raise ValidationError({"chain": f"No chain {chain_id} in this project."})
        samples = samples.filter(chain_id=chain_id)
    if unparsed is not None:
        samples = samples.filter(verdict__isnull=unparsed)
    if after is not None:
        samples = samples.filter(id__gt=after)
    return list(samples[:limit])


def training_run_list(*, project: Project) -> QuerySet[TrainingRun]:
    return TrainingRun.objects.filter(project=project).select_related("started_by", "model_version")


def model_version_list(*, project: Project) -> QuerySet[ModelVersion]:
    return ModelVersion.objects.filter(project=project).select_related(
        "training_run", "snapshot", "activated_by"
    )


def model_version_active_get(*, project: Project) -> ModelVersion | None:
    """The project's active version, or None."""
    return ModelVersion.objects.filter(project=project, is_active=True).first()


def evaluation_result_list(*, project: Project) -> QuerySet[EvaluationResult]:
    """Every version's figures on every evaluation set of the project, newest version
    first, then by set."""
    return (
        EvaluationResult.objects.filter(model_version__project=project)
        .select_related("model_version", "evaluation_set", "snapshot")
        .order_by("-model_version__version", "evaluation_set_id")
    )


@dataclass(frozen=True)
class EvaluationGap:
    """A version with no figures on a set of its project, or with figures measured on
    labels older than the set's latest label change (``stale``;
    ``services.evaluation_runs``)."""

    model_version_id: int
    version: int
    evaluation_set_id: int
    stale: bool = False


def evaluation_sets_labels_changed_at(*, evaluation_set_ids: Iterable[int]) -> dict[int, datetime]:
    """{set id: when the newest pass over one of its chains was made} for the sets whose
    chains have any: a lead's ruling, an annotator's revision or pass, an import's labels
    are each a new annotation, so this is when the labels a snapshot reads last changed.
    One query over the sets' chains' annotations."""
    rows = (
        Annotation.objects.filter(chain__evaluation_set_id__in=list(evaluation_set_ids))
        .values("chain__evaluation_set_id")
        .annotate(at=Max("created_at"))
        .values_list("chain__evaluation_set_id", "at")
    )
    return {set_id: at for set_id, at in rows if at is not None}


def figures_outdated(*, measured_with: datetime | None, labels_changed: datetime | None) -> bool:
    """Whether figures measured on a snapshot taken at ``measured_with`` rest on labels
    older than the set's last change (``evaluation_sets_labels_changed_at``); figures
    stored before their snapshot was kept (None) are left as they are.

    >>> from datetime import datetime as at
    >>> figures_outdated(measured_with=at(2026, 1, 1), labels_changed=at(2026, 1, 2))
    True
    >>> figures_outdated(measured_with=None, labels_changed=at(2026, 1, 2))
    False
    """
    return (
        measured_with is not None and labels_changed is not None and measured_with < labels_changed
    )


def evaluation_gaps(*, project_id: int) -> list[EvaluationGap]:
    """Each (version, set) of the project that holds no figures, or whose figures were
    measured with a snapshot taken before the set's labels last changed (figures stored
    before their snapshot was kept are left as they are), newest version first, then by
    set; four queries."""
    sets = list(
        EvaluationSet.objects.filter(project_id=project_id)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    if not sets:
        return []
    measured: dict[tuple[int, int], datetime | None] = {
        (version_id, set_id): at
        for version_id, set_id, at in EvaluationResult.objects.filter(
            evaluation_set_id__in=sets
        ).values_list("model_version_id", "evaluation_set_id", "snapshot__created_at")
    }
    changed = evaluation_sets_labels_changed_at(evaluation_set_ids=sets)
    versions = ModelVersion.objects.filter(project_id=project_id).order_by("-version")
    gaps = []
    for version_id, number in versions.values_list("pk", "version"):
        for set_id in sets:
            if (version_id, set_id) not in measured:
                gaps.append(EvaluationGap(version_id, number, set_id))
                continue
            if figures_outdated(
                measured_with=measured[(version_id, set_id)], labels_changed=changed.get(set_id)
            ):
                gaps.append(EvaluationGap(version_id, number, set_id, stale=True))
    return gaps


def evaluation_run_get_for_member(
    *,
    user: User | AnonymousUser,
    evaluation_run_id: int | str,
    roles: Iterable[str] = ML_AND_LEADS,
) -> EvaluationRun:
    return _get_for_member(
        queryset=EvaluationRun.objects.select_related("snapshot", "started_by"),
        object_id=evaluation_run_id,
        user=user,
        roles=roles,
    )


def evaluation_run_list(*, project: Project) -> QuerySet[EvaluationRun]:
    return EvaluationRun.objects.filter(project=project).select_related("snapshot", "started_by")


def scoring_run_list(*, project: Project) -> QuerySet[ScoringRun]:
    return ScoringRun.objects.filter(project=project).select_related("model_version")


def project_training_settings_get(*, project: Project) -> ProjectTrainingSettings:
    """The project's loop settings; an unsaved row with the defaults when it has none."""
    found = ProjectTrainingSettings.objects.filter(project=project).first()
    return found if found is not None else ProjectTrainingSettings(project=project)


def run_phase_view(*, run: RunLifecycle, now: datetime | None = None) -> dict[str, Any] | None:
    """What a run reports of its phase (``services.progress.RunProgress``), as the API
    and the ML page show it: the phase, its count, its rate and the seconds it should
    still take at that rate, and the phases before it with their durations. A finished
    run keeps its phases but no rate or ETA; None before the run's first report."""
    stored = run.phase or {}
    if not stored.get("name"):
        return None
    now = now or timezone.now()
    eta_seconds = None
    eta_at = parse_datetime(stored["eta_at"]) if stored.get("eta_at") else None
    running = run.status not in FINISHED_STATUSES
    if running and eta_at is not None:
        eta_seconds = max(0.0, round((eta_at - now).total_seconds(), 1))
    return {
        "name": stored["name"],
        "done": stored.get("done", 0),
        "total": stored.get("total", 0),
        "unit": stored.get("unit", ""),
        "detail": stored.get("detail", ""),
        "started_at": stored.get("started_at"),
        "rate": stored.get("rate") if running else None,
        "eta_seconds": eta_seconds,
        "past": stored.get("past", []),
    }
