"""Webhooks over HTTP, for a project's leads (annotators and ML staff get 403, anyone
outside the project 404, as every lead endpoint):

- ``GET|POST /api/v1/projects/{id}/webhooks/``: the webhooks; add one (its secret is in
  the answer, and in every later read by a lead).
- ``GET|PATCH|DELETE .../webhooks/{webhook_id}/``: one; change its URL, events,
  description or pause it, or rotate its secret (``"rotate_secret": true``); delete it.
- ``POST .../webhooks/{webhook_id}/test/``: send it a ``webhook.test`` message.
- ``GET .../webhooks/{webhook_id}/deliveries/``: its delivery log, newest first, paged.
- ``POST .../webhooks/{webhook_id}/deliveries/{delivery_id}/replay/``: send a message again.

Thin: check access, validate (unknown fields refused), call one service, serialize."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from annotation.api.inputs import InputSerializer
from annotation.api.permissions import LEADS, project_for_request, request_user
from annotation.models import Webhook, WebhookDelivery, WebhookEvent
from annotation.webhooks.selectors import (
    webhook_delivery_get,
    webhook_delivery_list,
    webhook_get,
    webhook_list,
)
from annotation.webhooks.services import (
    webhook_create,
    webhook_delete,
    webhook_delivery_replay,
    webhook_test_send,
    webhook_update,
)

NOT_A_LEAD = OpenApiResponse(description="A member who is not a lead of the project.")
NOT_FOUND = OpenApiResponse(
    description="No such project, webhook or delivery, or the caller is not a member."
)
TAGS = ["webhooks"]


def _url_field(**kwargs: object) -> serializers.URLField:
    return serializers.URLField(
        max_length=2000,
        help_text="Where messages are posted: http or https; a public address unless the "
        "server allows private ones (STEPLAB_WEBHOOK_ALLOW_PRIVATE).",
        **kwargs,  # type: ignore[arg-type]
    )


def _events_field(**kwargs: object) -> serializers.ListField:
    return serializers.ListField(
        child=serializers.ChoiceField(choices=WebhookEvent.choices),
        allow_empty=False,
        max_length=len(WebhookEvent.values),
        help_text="The events to send.",
        **kwargs,  # type: ignore[arg-type]
    )


class WebhookCreateInputSerializer(InputSerializer):
    url = _url_field()
    events = _events_field()
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    active = serializers.BooleanField(required=False, default=True)


class WebhookUpdateInputSerializer(InputSerializer):
    url = _url_field(required=False)
    events = _events_field(required=False)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    active = serializers.BooleanField(required=False)
    rotate_secret = serializers.BooleanField(
        required=False, help_text="True: a new secret; the old one stops verifying."
    )


class NoFieldsInputSerializer(InputSerializer):
    """No fields: a body that names any is a 400, not a silent no-op."""


class WebhookOutputSerializer(serializers.ModelSerializer):
    events = serializers.ListField(child=serializers.ChoiceField(choices=WebhookEvent.choices))
    secret = serializers.CharField(
        help_text="The Standard Webhooks secret (whsec_...) to verify signatures with."
    )
    created_by = serializers.CharField(source="created_by.username", allow_null=True, default=None)

    class Meta:
        model = Webhook
        fields = [
            "id",
            "url",
            "events",
            "description",
            "active",
            "secret",
            "created_by",
            "created_at",
        ]
        read_only_fields = fields


class WebhookDeliveryOutputSerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookDelivery
        fields = [
            "id",
            "event",
            "message_id",
            "payload",
            "status",
            "attempts",
            "next_attempt_at",
            "last_attempt_at",
            "last_status_code",
            "last_error",
            "response_ms",
            "replay_of",
            "created_at",
            "delivered_at",
        ]
        read_only_fields = fields


class WebhookListCreateApi(GenericAPIView):
    queryset = Webhook.objects.none()  # the schema generator's; access is checked per call
    serializer_class = WebhookOutputSerializer
    pagination_class = None

    @extend_schema(
        tags=TAGS,
        operation_id="projects_webhooks_list",
        summary="The project's webhooks (leads only)",
        responses={200: WebhookOutputSerializer(many=True), 403: NOT_A_LEAD, 404: NOT_FOUND},
    )
    def get(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        return Response(WebhookOutputSerializer(webhook_list(project=project), many=True).data)

    @extend_schema(
        tags=TAGS,
        operation_id="projects_webhooks_create",
        summary="Add a webhook (leads only)",
        description="Messages of the chosen events are posted to `url`, signed with the "
        "new `secret` (Standard Webhooks).",
        request=WebhookCreateInputSerializer,
        responses={
            201: WebhookOutputSerializer,
            400: OpenApiResponse(description="A refused URL, unknown events, unknown fields."),
            403: NOT_A_LEAD,
            404: NOT_FOUND,
        },
    )
    def post(self, request: Request, project_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        data = WebhookCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        webhook = webhook_create(project=project, user=request_user(request), **data.validated_data)
        return Response(WebhookOutputSerializer(webhook).data, status=status.HTTP_201_CREATED)


class WebhookDetailApi(GenericAPIView):
    queryset = Webhook.objects.none()
    serializer_class = WebhookOutputSerializer

    @extend_schema(
        tags=TAGS,
        operation_id="projects_webhooks_retrieve",
        summary="One webhook (leads only)",
        responses={200: WebhookOutputSerializer, 403: NOT_A_LEAD, 404: NOT_FOUND},
    )
    def get(self, request: Request, project_id: int, webhook_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        return Response(
            WebhookOutputSerializer(webhook_get(project=project, webhook_id=webhook_id)).data
        )

    @extend_schema(
        tags=TAGS,
        operation_id="projects_webhooks_update",
        summary="Change a webhook, pause it or rotate its secret (leads only)",
        request=WebhookUpdateInputSerializer,
        responses={
            200: WebhookOutputSerializer,
            400: OpenApiResponse(description="A refused URL, unknown events, unknown fields."),
            403: NOT_A_LEAD,
            404: NOT_FOUND,
        },
    )
    def patch(self, request: Request, project_id: int, webhook_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        data = WebhookUpdateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        webhook = webhook_get(project=project, webhook_id=webhook_id)
        webhook = webhook_update(webhook=webhook, changes=dict(data.validated_data))
        return Response(WebhookOutputSerializer(webhook).data)

    @extend_schema(
        tags=TAGS,
        operation_id="projects_webhooks_destroy",
        summary="Delete a webhook and its delivery log (leads only)",
        responses={204: None, 403: NOT_A_LEAD, 404: NOT_FOUND},
    )
    def delete(self, request: Request, project_id: int, webhook_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        webhook_delete(webhook=webhook_get(project=project, webhook_id=webhook_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookTestApi(GenericAPIView):
    serializer_class = WebhookDeliveryOutputSerializer

    @extend_schema(
        tags=TAGS,
        operation_id="projects_webhooks_test",
        summary="Send a test event to a webhook (leads only)",
        description="A `webhook.test` message, signed, retried and logged as any other; "
        "the answer is its delivery, still pending (a worker sends it).",
        request=NoFieldsInputSerializer,
        responses={202: WebhookDeliveryOutputSerializer, 403: NOT_A_LEAD, 404: NOT_FOUND},
    )
    def post(self, request: Request, project_id: int, webhook_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        NoFieldsInputSerializer(data=request.data).is_valid(raise_exception=True)
        delivery = webhook_test_send(webhook=webhook_get(project=project, webhook_id=webhook_id))
        return Response(
            WebhookDeliveryOutputSerializer(delivery).data, status=status.HTTP_202_ACCEPTED
        )


class WebhookDeliveryListApi(GenericAPIView):
    queryset = WebhookDelivery.objects.none()
    serializer_class = WebhookDeliveryOutputSerializer

    @extend_schema(
        tags=TAGS,
        operation_id="projects_webhooks_deliveries",
        summary="A webhook's delivery log, newest first (leads only)",
        responses={
            200: WebhookDeliveryOutputSerializer(many=True),
            403: NOT_A_LEAD,
            404: NOT_FOUND,
        },
    )
    def get(self, request: Request, project_id: int, webhook_id: int) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        webhook = webhook_get(project=project, webhook_id=webhook_id)
        page = self.paginate_queryset(webhook_delivery_list(webhook=webhook))
        return self.get_paginated_response(WebhookDeliveryOutputSerializer(page, many=True).data)


class WebhookDeliveryReplayApi(GenericAPIView):
    serializer_class = WebhookDeliveryOutputSerializer

    @extend_schema(
        tags=TAGS,
        operation_id="projects_webhooks_deliveries_replay",
        summary="Send a delivery's message again (leads only)",
        description="A new delivery with the same `webhook-id` and payload, sent now; a "
        "delivery still waiting for a retry is closed as replayed.",
        request=NoFieldsInputSerializer,
        responses={202: WebhookDeliveryOutputSerializer, 403: NOT_A_LEAD, 404: NOT_FOUND},
    )
    def post(
        self, request: Request, project_id: int, webhook_id: int, delivery_id: int
    ) -> Response:
        project = project_for_request(request=request, project_id=project_id, roles=LEADS)
        NoFieldsInputSerializer(data=request.data).is_valid(raise_exception=True)
        webhook = webhook_get(project=project, webhook_id=webhook_id)
        replay = webhook_delivery_replay(
            delivery=webhook_delivery_get(webhook=webhook, delivery_id=delivery_id)
        )
        return Response(
            WebhookDeliveryOutputSerializer(replay).data, status=status.HTTP_202_ACCEPTED
        )
