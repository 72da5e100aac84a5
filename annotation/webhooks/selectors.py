"""A lead's reads of the project's webhooks and their delivery logs."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from annotation.models import Project, Webhook, WebhookDelivery


def webhook_list(*, project: Project) -> QuerySet[Webhook]:
    return Webhook.objects.filter(project=project).order_by("id")


def webhook_get(*, project: Project, webhook_id: int) -> Webhook:
    """The project's webhook ``webhook_id``; Http404 for another project's or none."""
    webhook = Webhook.objects.filter(project=project, pk=webhook_id).first()
    if webhook is None:
        raise Http404("No such webhook.")
    return webhook


def webhook_delivery_list(*, webhook: Webhook) -> QuerySet[WebhookDelivery]:
    """The delivery log, newest first."""
    return WebhookDelivery.objects.filter(webhook=webhook).order_by("-id")


def webhook_delivery_get(*, webhook: Webhook, delivery_id: int) -> WebhookDelivery:
    delivery = WebhookDelivery.objects.filter(webhook=webhook, pk=delivery_id).first()
    if delivery is None:
        raise Http404("No such delivery.")
    return delivery
