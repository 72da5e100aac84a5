"""HTML pages. Thin: who is asking, one selector, one template. Every project page goes
through the same access check as the API (``project_get_for_member``), so a project the
user does not belong to is a 404 here too."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from annotation.exporters.formats import EXPORT_DESCRIPTIONS, EXPORT_FORMATS
from annotation.models import ImportBatch, Role
from annotation.selectors.access import project_get_for_member
from annotation.selectors.datasets import snapshot_get, training_snapshots
from annotation.selectors.projects import (
    membership_list,
    progress_as_annotators_see_it,
    project_get_with_progress,
    project_list_with_progress,
)


class LoginView(auth_views.LoginView):
    """Failed sign-ins are counted and locked out by django-axes (settings, "Sign-in")."""

    redirect_authenticated_user = True


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponse:
    projects = progress_as_annotators_see_it(project_list_with_progress(user=request.user))
    return render(request, "annotation/home.html", {"projects": projects})


@require_GET
@login_required
def project_overview(request: HttpRequest, project_id: int) -> HttpResponse:
    """``/projects/{id}/``: the lead dashboard for leads, the project overview for the
    other members. The dashboard's numbers come from the lead-only dashboard API, so the
    page carries only where to fetch them (and the export and snapshot endpoints)."""
    project = project_get_with_progress(user=request.user, project_id=project_id)
    is_lead = project.my_role == Role.LEAD  # type: ignore[attr-defined]
    context: dict[str, Any] = {
        "project": project,
        "is_lead": is_lead,
        "members": list(membership_list(project=project)),
        # Imports are a lead's business (invariant 6): others do not see file names.
        "imports": (
            list(ImportBatch.objects.filter(project=project).order_by("-created_at")[:10])
            if is_lead
            else []
        ),
    }
    if not is_lead:
        return render(request, "annotation/project_overview.html", context)
    context["snapshot"] = snapshot_get(project=project)
    context["training_snapshots"] = training_snapshots(project=project)
    context["export_formats"] = [(fmt, EXPORT_DESCRIPTIONS[fmt]) for fmt in EXPORT_FORMATS]
    context["config"] = {
        "projectId": project.pk,
        "api": {
            "dashboard": reverse("api-project-dashboard", args=[project.pk]),
            "snapshots": reverse("api-project-snapshots", args=[project.pk]),
            "export": reverse("api-project-export", args=[project.pk]),
            "flags": reverse("api-project-flags", args=[project.pk]),
            # The prefix of /api/v1/chains/{id}/unflag/.
            "chain": reverse("api-chain-unflag", args=[0]).removesuffix("0/unflag/"),
        },
    }
    return render(request, "annotation/dashboard.html", context)


@require_GET
@login_required
def review_page(request: HttpRequest, project_id: int) -> HttpResponse:
    """``/projects/{id}/review/`` (leads only: 403 for other members, 404 for
    non-members): disputed chains, worst first, every annotator's ratings side by side and
    the adjudication form. Everything moves through the review API
    (``annotation.api.review``); the page carries only the endpoints."""
    project = project_get_for_member(user=request.user, project_id=project_id, roles=[Role.LEAD])
    config = {
        "projectId": project.pk,
        "labelingMode": project.labeling_mode,
        "api": {
            "disagreements": reverse("api-project-disagreements", args=[project.pk]),
            # The prefix of /api/v1/chains/{id}/labels/ and .../adjudicate/.
            "chain": reverse("api-chain-labels", args=[0]).removesuffix("0/labels/"),
        },
    }
    annotators = sorted(
        project.memberships.filter(role=Role.ANNOTATOR).values_list("user__username", flat=True)
    )
    return render(
        request,
        "annotation/review.html",
        {"project": project, "config": config, "annotators": annotators},
    )


@require_GET
@login_required
def label_workspace(request: HttpRequest, project_id: int) -> HttpResponse:
    """The annotator workspace. The page carries only the project's settings; chains come
    from the queue API (``assignments/next/``), so the page and any other client see the
    same fields and nothing else (no gold or imported labels, no other annotators)."""
    project = project_get_for_member(user=request.user, project_id=project_id)
    config = {
        "projectId": project.pk,
        "labelingMode": project.labeling_mode,
        "leaseSeconds": project.lease_minutes * 60,
        "api": {
            "next": reverse("assignment-next", args=[project.pk]),
            # A second lease, leased and rendered while the annotator works on the first.
            "prefetch": reverse("assignment-prefetch", args=[project.pk]),
            "stats": reverse("project-my-stats", args=[project.pk]),
            # The prefix of /api/v1/assignments/{id}/{action}/.
            "assignment": reverse("assignment-renew", args=[0]).removesuffix("0/renew/"),
        },
    }
    return render(request, "annotation/label.html", {"project": project, "config": config})
