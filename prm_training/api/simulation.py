"""Simulation runs over HTTP: the paired active-learning simulation on a project's labels,
whose result the 'auto' strategy reads (``services.simulation``). ML staff start, cancel
and retry; leads may read. Thin, as the rest of the PRM API (``api.views``)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.access import project_get_for_member
from annotation.api.inputs import InputSerializer
from annotation.api.permissions import request_user
from prm_training.api.views import (
    RUN_LIFECYCLE_FIELDS,
    RUN_LIST_LIMIT,
    RUN_RESPONSES,
    _RunOutputSerializer,
    run_action_views,
)
from prm_training.models import SimulationRun, SimulationSize
from prm_training.selectors import (
    ML_AND_LEADS,
    ML_ONLY,
    simulation_run_get_for_member,
    simulation_run_list,
)
from prm_training.services.runs import runs_reap_stale_of_project
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


class SimulationRunOutputSerializer(_RunOutputSerializer):
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


class ProjectSimulationRunsApi(APIView):
    @extend_schema(
        operation_id="simulation_runs_list",
        responses={200: SimulationRunOutputSerializer(many=True), **RUN_RESPONSES},
        summary="The project's latest simulation runs (ML staff and leads)",
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_get_for_member(
            user=request.user, project_id=project_id, roles=ML_AND_LEADS
        )
        runs_reap_stale_of_project(project_id=project.pk)
        runs = simulation_run_list(project=project)[:RUN_LIST_LIMIT]
        return Response(SimulationRunOutputSerializer(runs, many=True).data)

    @extend_schema(
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
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_get_for_member(user=request.user, project_id=project_id, roles=ML_ONLY)
        payload = SimulationRunInputSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        run = simulation_run_start(
            project=project, user=request_user(request), **payload.validated_data
        )
        return Response(SimulationRunOutputSerializer(run).data, status=status.HTTP_201_CREATED)


class SimulationRunDetailApi(APIView):
    @extend_schema(
        operation_id="simulation_runs_retrieve",
        responses={200: SimulationRunOutputSerializer, **RUN_RESPONSES},
        summary="Follow a simulation run (ML staff and leads)",
    )
    def get(self, request: Request, simulation_run_id: int) -> Response:
        run = simulation_run_get_for_member(user=request.user, simulation_run_id=simulation_run_id)
        if runs_reap_stale_of_project(project_id=run.project_id):
            run = simulation_run_get_for_member(
                user=request.user, simulation_run_id=simulation_run_id
            )
        return Response(SimulationRunOutputSerializer(run).data)


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
