"""Routes of a project's webhooks (leads)."""

from django.urls import path

from annotation.webhooks.api import (
    WebhookDeliveryListApi,
    WebhookDeliveryReplayApi,
    WebhookDetailApi,
    WebhookListCreateApi,
    WebhookTestApi,
)

PREFIX = "projects/<id:project_id>/webhooks/"

urlpatterns = [
    path(PREFIX, WebhookListCreateApi.as_view(), name="api-project-webhooks"),
    path(f"{PREFIX}<id:webhook_id>/", WebhookDetailApi.as_view(), name="api-project-webhook"),
    path(
        f"{PREFIX}<id:webhook_id>/test/", WebhookTestApi.as_view(), name="api-project-webhook-test"
    ),
    path(
        f"{PREFIX}<id:webhook_id>/deliveries/",
        WebhookDeliveryListApi.as_view(),
        name="api-project-webhook-deliveries",
    ),
    path(
        f"{PREFIX}<id:webhook_id>/deliveries/<id:delivery_id>/replay/",
        WebhookDeliveryReplayApi.as_view(),
        name="api-project-webhook-delivery-replay",
    ),
]
