"""The webhooks page, ``/projects/{id}/webhooks/`` (leads only: 403 for other members, 404
for non-members). It only renders: the page lists, adds, changes and deletes webhooks,
sends test events, reads the delivery log and replays deliveries through
``/api/v1/projects/{id}/webhooks/`` (``annotation.webhooks.api``)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from annotation.access import project_get_for_member
from annotation.models import WebhookEvent
from annotation.navigation import page_roles
from annotation.webhooks.delivery import retry_delays


@require_GET
@login_required
def webhooks_page(request: HttpRequest, project_id: int) -> HttpResponse:
    project = project_get_for_member(
        user=request.user, project_id=project_id, roles=page_roles("webhooks-page")
    )
    config = {
        "events": dict(WebhookEvent.choices),
        "api": {
            "webhooks": reverse("api-project-webhooks", args=[project.pk]),
        },
    }
    context = {
        "project": project,
        "config": config,
        "events": WebhookEvent.choices,
        "attempts": len(retry_delays()) + 1,
    }
    return render(request, "annotation/webhooks.html", context)
