"""What every kind of run's endpoints share (training, scoring, simulation,
machine-label and evaluation runs): the lifecycle's serializers, the list-and-start and
follow views as bases, and the cancel and retry views.

Every kind answers the same way: resolve the object through a selector (non-member 404,
wrong role 403), reap stale runs of the project before showing them, call one service,
serialize. A kind's module says only what differs: its selectors, its serializers, its
start call and its schema's words."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import User
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.access import project_get_for_member
from annotation.api.permissions import request_user
from annotation.models import Project
from prm_training.models import RunLifecycle
from prm_training.selectors import ML_AND_LEADS, ML_ONLY, run_phase_view
from prm_training.services.runs import runs_reap_stale_of_project

NOT_FOUND = OpenApiResponse(description="No such object, or not in one of your projects.")
FORBIDDEN = OpenApiResponse(description="Your role in this project does not allow this.")
RUN_LIST_LIMIT = 50
# What a run endpoint answers a caller it refuses.
RUN_RESPONSES = {403: FORBIDDEN, 404: NOT_FOUND}


class PastPhaseSerializer(serializers.Serializer):
    name = serializers.CharField()
    seconds = serializers.FloatField()


class RunPhaseSerializer(serializers.Serializer):
    """What a running run does now (its last report, at most a second or so old)."""

    name = serializers.CharField(
        help_text="snapshot, loading, encoding, training, evaluating, comparing, publishing, "
        "scoring, simulating, writing."
    )
    done = serializers.IntegerField(help_text="Units done in this phase.")
    total = serializers.IntegerField(help_text="Units in this phase; 0 when not counted.")
    unit = serializers.CharField(help_text="steps, batches, trainings... (blank: not counted)")
    detail = serializers.CharField(help_text='e.g. "epoch 3/40".')
    started_at = serializers.DateTimeField(allow_null=True)
    rate = serializers.FloatField(
        allow_null=True, help_text="Units per second in this phase so far; None until measured."
    )
    eta_seconds = serializers.FloatField(
        allow_null=True, help_text="Seconds this phase should still take at that rate."
    )
    past = PastPhaseSerializer(many=True, help_text="The phases before, with their durations.")


class RunOutputSerializer(serializers.ModelSerializer):
    """What every kind of run shows of its lifecycle."""

    phase = serializers.SerializerMethodField()

    @extend_schema_field(RunPhaseSerializer(allow_null=True))
    def get_phase(self, run: RunLifecycle) -> dict[str, Any] | None:
        return run_phase_view(run=run)


def run_cancel_view(
    *,
    noun: str,
    operation: str,
    get: Callable[..., Any],
    cancel: Callable[..., Any],
    output: type[serializers.Serializer],
    roles: tuple[str, ...],
    who: str,
    description: str,
) -> type[APIView]:
    """The cancel endpoint of one kind of run, which every kind answers the same way: the
    run through ``get`` (the URL's id by its own name, ``roles`` allowed), one service
    call, the run serialized. ``noun``: "training run"; ``operation``: the OpenAPI
    operation ids' stem ("training_runs")."""

    class CancelApi(APIView):
        @extend_schema(
            operation_id=f"{operation}_cancel",
            request=None,
            responses={
                200: output,
                400: OpenApiResponse(description="The run has already finished."),
                **RUN_RESPONSES,
            },
            summary=f"Cancel a {noun} ({who})",
            description=description,
        )
        def post(self, request: Request, **ids: int) -> Response:
            run = cancel(run=get(user=request.user, roles=roles, **ids))
            return Response(output(run).data)

    CancelApi.__name__ = CancelApi.__qualname__ = f"{_stem(noun)}CancelApi"
    return CancelApi


def _stem(noun: str) -> str:
    return "".join(word.capitalize() for word in noun.replace("-", " ").split())


def run_action_views(
    *,
    noun: str,
    operation: str,
    get: Callable[..., Any],
    cancel: Callable[..., Any],
    retry: Callable[..., Any],
    output: type[serializers.Serializer],
    roles: tuple[str, ...],
    who: str,
    cancel_description: str,
    retry_description: str,
) -> tuple[type[APIView], type[APIView]]:
    """The cancel (``run_cancel_view``) and retry endpoints of one kind of run; retry
    answers as cancel does, with the new run (201)."""

    class RetryApi(APIView):
        @extend_schema(
            operation_id=f"{operation}_retry",
            request=None,
            responses={
                201: output,
                400: OpenApiResponse(description="The run has not failed and was not cancelled."),
                **RUN_RESPONSES,
            },
            summary=f"Retry a failed or cancelled {noun} ({who})",
            description=retry_description,
        )
        def post(self, request: Request, **ids: int) -> Response:
            run = get(user=request.user, roles=roles, **ids)
            new = retry(run=run, user=request_user(request))
            return Response(output(new).data, status=status.HTTP_201_CREATED)

    RetryApi.__name__ = RetryApi.__qualname__ = f"{_stem(noun)}RetryApi"
    cancel_api = run_cancel_view(
        noun=noun,
        operation=operation,
        get=get,
        cancel=cancel,
        output=output,
        roles=roles,
        who=who,
        description=cancel_description,
    )
    return cancel_api, RetryApi


RUN_LIFECYCLE_FIELDS = [
    "phase",
    "worker",
    "heartbeat_at",
    "attempts",
    "cancel_requested",
    "retry_of",
]


def run_list_schema(*, operation: str, output: type[serializers.Serializer], summary: str) -> Any:
    """The schema of a kind's run list (``ProjectRunsApi.get``)."""
    return extend_schema(
        operation_id=f"{operation}_list",
        responses={200: output(many=True), **RUN_RESPONSES},
        summary=summary,
    )


# A project's runs of one kind: the latest ``RUN_LIST_LIMIT`` (GET, ML staff and leads;
# stale runs reaped first) and a new one (POST, ``start_roles``). A kind sets the class
# attributes and ``start``, and its schema with ``extend_schema_view``. (Comments, not
# docstrings: a view's docstring becomes its operations' description in the schema.)
class ProjectRunsApi(APIView):
    list_runs: Callable[..., Any]  # selector: project -> the kind's runs, newest first
    input: type[serializers.Serializer]
    output: type[serializers.Serializer]
    start_roles: tuple[str, ...] = ML_ONLY

    def start(self, *, project: Project, user: User, data: dict[str, Any]) -> Any:
        """The new run, from the validated input."""
        raise NotImplementedError

    def get(self, request: Request, project_id: int) -> Response:
        project = project_get_for_member(
            user=request.user, project_id=project_id, roles=ML_AND_LEADS
        )
        runs_reap_stale_of_project(project_id=project.pk)
        runs = type(self).list_runs(project=project)[:RUN_LIST_LIMIT]
        return Response(self.output(runs, many=True).data)

    def post(self, request: Request, project_id: int) -> Response:
        project = project_get_for_member(
            user=request.user, project_id=project_id, roles=self.start_roles
        )
        payload = self.input(data=request.data)
        payload.is_valid(raise_exception=True)
        run = self.start(
            project=project, user=request_user(request), data=dict(payload.validated_data)
        )
        return Response(self.output(run).data, status=status.HTTP_201_CREATED)


# One run, to follow it (ML staff and leads): through ``get_run`` (the URL's id by its own
# name), again after reaping when its project had a stale run.
class RunDetailApi(APIView):
    get_run: Callable[..., Any]  # selector: user and the URL's id -> the run
    output: type[serializers.Serializer]

    def get(self, request: Request, **ids: int) -> Response:
        run = type(self).get_run(user=request.user, **ids)
        if runs_reap_stale_of_project(project_id=run.project_id):
            run = type(self).get_run(user=request.user, **ids)
        return Response(self.output(run).data)
