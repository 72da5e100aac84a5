"""Simulation runs over HTTP: the paired active-learning simulation on a project's labels,
whose result the 'auto' strategy reads (``services.simulation``). ML staff start, cancel
and retry; leads may read. Thin, as the rest of the PRM API (``api.runs``)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers

from annotation.api.inputs import InputSerializer
from annotation.models import Project
from prm_training.api.runs import (
    RUN_LIFECYCLE_FIELDS,
    RUN_RESPONSES,
    ProjectRunsApi,
    RunDetailApi,
    RunOutputSerializer,
    run_action_views,
    run_list_schema,
)
from prm_training.models import SimulationRun, SimulationSize
from prm_training.selectors import (
    ML_ONLY,
    simulation_run_get_for_member,
    simulation_run_list,
)
from prm_training.services.simulation import (
    simulation_run_cancel,
    simulation_run_retry,
    simulation_run_start,
)

# A ceiling for the schema; the node's own limits (lower) are checked by the service,
# which names them.
SIMULATION_MAX = 10_000


class SimulationRunInputSerializer(InputSerializer):
    size = serializers.ChoiceField(
        choices=SimulationSize.choices,
        help_text="quick: a smoke test (3 seeds, 2 rounds of 8); full: sized to resolve 0.02 "
        "F1 on ProcessBench (20 seeds, 8 rounds of 40).",
    )
    seeds = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=SIMULATION_MAX,
        help_text="Seeds instead of the size's, at most the node's limit "
        "(STEPLAB_SIMULATION_MAX_SEEDS).",
    )
    rounds = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=SIMULATION_MAX,
        help_text="Rounds instead of the size's, at most the node's limit "
        "(STEPLAB_SIMULATION_MAX_ROUNDS).",
    )


class SimulationRunOutputSerializer(RunOutputSerializer):
    started_by: serializers.SlugRelatedField = serializers.SlugRelatedField(
        slug_field="username", read_only=True
    )

    class Meta:
        model = SimulationRun
        fields = [
            "id",
            "project",
            "status",
            "size",
            "seeds",
            "rounds",
            "snapshot_version",
            "evidence",
            "started_by",
            "created_at",
            "started_at",
            "finished_at",
            "error",
            *RUN_LIFECYCLE_FIELDS,
        ]


@extend_schema_view(
    get=run_list_schema(
        operation="simulation_runs",
        output=SimulationRunOutputSerializer,
        summary="The project's latest simulation runs (ML staff and leads)",
    ),
    post=extend_schema(
        operation_id="simulation_runs_start",
        request=SimulationRunInputSerializer,
        responses={
            201: SimulationRunOutputSerializer,
            400: OpenApiResponse(
                description="A size unknown, or seeds or rounds past the node's limit."
            ),
            **RUN_RESPONSES,
        },
        summary="Start a simulation run on the project's labels (ML staff)",
        description="Queues a run on the GPU workers. It replays the project's newest snapshot "
        "as the oracle, compares every acquisition strategy with random at equal labeled "
        "steps, and stores the result where the 'auto' strategy reads it.",
    ),
)
class ProjectSimulationRunsApi(ProjectRunsApi):
    list_runs = simulation_run_list
    input = SimulationRunInputSerializer
    output = SimulationRunOutputSerializer

    def start(self, *, project: Project, user: User, data: dict[str, Any]) -> SimulationRun:
        return simulation_run_start(project=project, user=user, **data)


@extend_schema_view(
    get=extend_schema(
        operation_id="simulation_runs_retrieve",
        responses={200: SimulationRunOutputSerializer, **RUN_RESPONSES},
        summary="Follow a simulation run (ML staff and leads)",
    )
)
class SimulationRunDetailApi(RunDetailApi):
    get_run = simulation_run_get_for_member
    output = SimulationRunOutputSerializer


SimulationRunCancelApi, SimulationRunRetryApi = run_action_views(
    noun="simulation run",
    operation="simulation_runs",
    get=simulation_run_get_for_member,
    cancel=simulation_run_cancel,
    retry=simulation_run_retry,
    output=SimulationRunOutputSerializer,
    roles=ML_ONLY,
    who="ML staff",
    cancel_description="A queued run is cancelled at once; a running one stops within about "
    "a second and stores nothing: 'auto' keeps the evidence it had.",
    retry_description="Queues a new run with the same size, seeds and rounds (`retry_of` "
    "names the old one); it replays the project's newest snapshot.",
)
