"""Routing over HTTP (issue 23, ``annotation.routing.services``):
`GET /api/v1/projects/{id}/routing/` (leads and ML staff; annotators 403, non-members 404)
what the lead's rules did and each source's standing; `POST .../routing/run/` (leads only)
sends a routing pass to a worker and answers 202 at once. Thin: check access, call the
selector or the service, serialize."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from annotation.api.errors import ServiceUnavailable
from annotation.api.permissions import LEADS, LEADS_AND_ML, project_for_request
from annotation.models import ChainRouting
from annotation.projects.api.dashboard import ProportionOutputSerializer
from annotation.routing.selectors import routing_summary
from annotation.routing.services import chains_route_enqueue, routing_sources


class RoutingSourceOutputSerializer(serializers.Serializer):
    source = serializers.CharField()  # type: ignore[assignment]  # a field, not Field.source
    name = serializers.CharField()
    kappa = serializers.FloatField(
        allow_null=True,
        help_text="Cohen's kappa against people's consensus; null until they share a step.",
    )
    chains_compared = serializers.IntegerField(
        help_text="Chains both the source and people's consensus label."
    )
    usable = serializers.BooleanField(help_text="Whether the source routes chains now.")
    reason = serializers.CharField(help_text='Why it does not ("" when usable).')


class RoutingChainsOutputSerializer(serializers.Serializer):
    agreed = serializers.IntegerField(help_text="Machine-agreed, accepted without a person.")
    spot_check = serializers.IntegerField(
        help_text="Machine-agreed, sent to a person as spot checks (waiting or checked)."
    )
    disagreed = serializers.IntegerField(help_text="The sources disagree: people first.")
    second_look = serializers.IntegerField(
        help_text="The PRM contradicts a person's label: another person looks again."
    )


class RoutingOutputSerializer(serializers.Serializer):
    accept = serializers.BooleanField(help_text="Whether machine-agreed chains skip people.")
    spot_check = serializers.FloatField(help_text="The share of them sent to a person anyway.")
    min_kappa = serializers.FloatField(help_text="The kappa a source needs to route.")
    second_look = serializers.FloatField(help_text="PRM confidence for a second look; 0: off.")
    sources = RoutingSourceOutputSerializer(
        many=True, help_text="The lead's routing sources, in their order; empty: routing is off."
    )
    chains = RoutingChainsOutputSerializer(help_text="Chains each rule holds now.")
    spot_checks_waiting = serializers.IntegerField(
        help_text="Spot checks people have not finished yet."
    )
    spot_check_errors = ProportionOutputSerializer(
        help_text="Finished spot checks whose people's consensus puts the first error "
        "elsewhere than the machines agreed, with Wilson's 95 % interval."
    )


class RoutingRunOutputSerializer(serializers.Serializer):
    detail = serializers.CharField()


class RoutingApi(APIView):
    """Not a list: one project's figures."""

    @extend_schema(
        tags=["review"],
        operation_id="projects_routing_retrieve",
        summary="What routing did and each routing source's kappa (leads and ML staff)",
        responses={
            200: RoutingOutputSerializer,
            403: OpenApiResponse(description="An annotator."),
            404: OpenApiResponse(description="No such project, or not a member."),
        },
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS_AND_ML)
        summary = routing_summary(project=project)
        data: dict[str, Any] = {
            "accept": project.routing_accept,
            "spot_check": project.routing_spot_check,
            "min_kappa": project.routing_min_kappa,
            "second_look": project.routing_second_look,
            "sources": routing_sources(project=project),
            "chains": {
                value: summary.chains.get(value, 0) for value in ChainRouting.values if value
            },
            "spot_checks_waiting": summary.spot_checks_waiting,
            "spot_check_errors": summary.spot_check_errors,
        }
        return Response(RoutingOutputSerializer(data).data)


class RoutingRunApi(APIView):
    @extend_schema(
        tags=["review"],
        operation_id="projects_routing_run_create",
        summary="Route the project's chains now (leads only)",
        description="Sends a routing pass to a worker and answers at once; `GET .../routing/` "
        "shows its outcome once it ran. A pass runs by itself when a lead changes a "
        "routing rule and when a rollout or judge run finishes.",
        request=None,
        responses={
            202: RoutingRunOutputSerializer,
            403: OpenApiResponse(description="A member who is not a lead."),
            404: OpenApiResponse(description="No such project, or not a member."),
            503: OpenApiResponse(description="The task queue could not be reached; try again."),
        },
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        if not chains_route_enqueue(project_id=project.pk):
            raise ServiceUnavailable(
                "The task queue could not be reached; try again.", code="broker_unreachable"
            )
        return Response(
            RoutingRunOutputSerializer({"detail": "A routing pass is queued."}).data,
            status=status.HTTP_202_ACCEPTED,
        )
