"""HTML pages. Thin: who is asking, one selector, one template. Every project page goes
through the same access check as the API (``project_get_for_member``), so a project the
user does not belong to is a 404 here too."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, cast

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from annotation.access import project_create_allowed, project_get_for_member
from annotation.api.fields import BIGINT_MAX
from annotation.chains.services import EXTRA_LABELS_MAX
from annotation.datasets.exporters.formats import (
    EXPORT_DESCRIPTIONS,
    EXPORT_FORMATS,
    MONTE_CARLO_FORMATS,
)
from annotation.datasets.importers.formats import FORMATS as IMPORT_FORMATS
from annotation.datasets.snapshot_options import MIN_SUPPORT_MAX, SEED_MAX
from annotation.datasets.snapshot_reads import snapshot_get, snapshot_options, training_snapshots
from annotation.labeling.history import history_annotator_resolve
from annotation.models import (
    BulkActionKind,
    EvaluationSet,
    ImportBatch,
    ImportLabels,
    LabelingMode,
    MachineSource,
    Project,
    Role,
    StepSplit,
)
from annotation.navigation import page_roles, project_pages
from annotation.projects.invite_lists import MAX_LIST_CHARS
from annotation.projects.selectors import (
    chains_imported_count,
    membership_list,
    progress_as_annotators_see_it,
    project_get_with_progress,
    project_list_with_progress,
)
from annotation.sso import sso_providers
from annotation.sso_ldap import ldap_sign_in_name, password_form_shown

if TYPE_CHECKING:
    from django.contrib.auth.models import User


class LoginView(auth_views.LoginView):
    """Failed sign-ins are counted and locked out by django-axes (settings, "Sign-in").
    A "Sign in with <name>" button per configured identity provider (annotation/sso.py);
    with STEPLAB_LOCAL_PASSWORDS off the password form is gone and a password posted
    here is refused (superusers' break-glass door is /admin/login/), unless LDAP is on
    (annotation/sso_ldap.py): then the form takes directory accounts only."""

    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not password_form_shown():
            raise PermissionDenied("Password sign-in is off; use single sign-on.")
        return super().post(request, *args, **kwargs)

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["sso_providers"] = sso_providers()
        # The form is kept for directory (LDAP) accounts when local passwords are off.
        context["password_form"] = password_form_shown()
        context["ldap_name"] = ldap_sign_in_name()
        return context


@require_GET
@login_required
def home(request: HttpRequest) -> HttpResponse:
    projects = progress_as_annotators_see_it(project_list_with_progress(user=request.user))
    return render(
        request,
        "annotation/home.html",
        {"projects": projects, "can_create": project_create_allowed(user=request.user)},
    )


def _settings_form_context() -> dict[str, Any]:
    """The choices of the settings form, shared by the create and the settings pages."""
    return {
        "labeling_modes": LabelingMode.choices,
        "step_splits": StepSplit.choices,
        "import_label_policies": ImportLabels.choices,
        "machine_sources": MachineSource.choices,
        "preview_url": reverse("api-guidelines-preview"),
    }


@require_GET
@login_required
def project_new(request: HttpRequest) -> HttpResponse:
    """``/projects/new/`` (who may create projects: the API's rule, staff; 403 for anyone
    else). The page posts to ``POST /api/v1/projects/``; the creator becomes the lead and
    lands on the new project's members page."""
    if not project_create_allowed(user=request.user):
        raise PermissionDenied("Only staff users can create projects.")
    # The form starts from the model's defaults, which are the API's defaults too.
    defaults = {field.name: field.get_default() for field in Project._meta.concrete_fields}
    config = {
        "mode": "create",
        "api": {"projects": reverse("api-projects"), "preview": reverse("api-guidelines-preview")},
        # The members page of a new project: this prefix + its id + "/members/".
        "projectPage": reverse("project-overview", args=[0]).removesuffix("0/"),
    }
    context = {"config": config, "defaults": defaults, **_settings_form_context()}
    return render(request, "annotation/project_new.html", context)


@require_GET
@login_required
def project_settings(request: HttpRequest, project_id: int) -> HttpResponse:
    """``/projects/{id}/settings/`` (leads only: 403 for other members, 404 for
    non-members). The form loads from and saves through ``/api/v1/projects/{id}/``
    (``project_update``): a 400 names each field's errors and saves nothing."""
    project = project_get_for_member(
        user=request.user, project_id=project_id, roles=page_roles("project-settings")
    )
    config = {
        "mode": "edit",
        "api": {
            "project": reverse("api-project", args=[project.pk]),
            "preview": reverse("api-guidelines-preview"),
        },
    }
    context = {"project": project, "config": config, **_settings_form_context()}
    return render(request, "annotation/project_settings.html", context)


@require_GET
@login_required
def project_members(request: HttpRequest, project_id: int) -> HttpResponse:
    """``/projects/{id}/members/`` (leads only, as the settings page): the list, adding by
    username, role changes and removal, all through ``/api/v1/projects/{id}/members/``;
    invitations (one person, or a list or CSV file) and the pending ones, revoked from
    the list, through ``/api/v1/projects/{id}/invites/``."""
    project = project_get_for_member(
        user=request.user, project_id=project_id, roles=page_roles("project-members")
    )
    config = {
        "me": request.user.pk,
        # A superuser manages every project, member or not; anyone else who leaves the
        # leads leaves this page.
        "superuser": request.user.is_superuser,
        "roles": dict(Role.choices),
        "overview": reverse("project-overview", args=[project.pk]),
        "home": reverse("home"),
        "api": {
            "members": reverse("api-project-members", args=[project.pk]),
            # The prefix of /api/v1/projects/{id}/members/{user_id}/.
            "member": reverse("api-project-member", args=[project.pk, 0]).removesuffix("0/"),
            "invites": reverse("api-project-invites", args=[project.pk]),
            "invitesBulk": reverse("api-project-invites-bulk", args=[project.pk]),
            # The prefix of /api/v1/projects/{id}/invites/{invite_id}/revoke/.
            "invite": reverse("api-project-invite-revoke", args=[project.pk, 0]).removesuffix(
                "0/revoke/"
            ),
        },
        "maxListChars": MAX_LIST_CHARS,
    }
    context = {
        "project": project,
        "config": config,
        "roles": Role.choices,
        "invite_days": _invite_day_choices(),
        "invite_max_rows": settings.STEPLAB_INVITE_MAX_ROWS,
        "email_enabled": settings.STEPLAB_EMAIL_ENABLED,
    }
    return render(request, "annotation/project_members.html", context)


def _invite_day_choices() -> list[tuple[int, bool]]:
    """How long a new link may work, in days, the default selected."""
    default, longest = settings.STEPLAB_INVITE_DAYS, settings.STEPLAB_INVITE_MAX_DAYS
    days = sorted({d for d in (1, 3, 7, 14, 30) if d <= longest} | {default})
    return [(d, d == default) for d in days]


@require_GET
@login_required
def project_overview(request: HttpRequest, project_id: int) -> HttpResponse:
    """``/projects/{id}/``: the lead dashboard for leads, the project overview for the
    other members. The dashboard's numbers come from the lead-only dashboard API, so the
    page carries only where to fetch them (and the export and snapshot endpoints)."""
    project = project_get_with_progress(user=request.user, project_id=project_id)
    role = project.my_role  # type: ignore[attr-defined]
    is_lead = role == Role.LEAD
    context: dict[str, Any] = {
        "project": project,
        "is_lead": is_lead,
        # Every page the caller's role may open, and no other (annotation.navigation).
        "pages": project_pages(role=role, project_id=project.pk),
        "members": list(membership_list(project=project)),
        # Imports are a lead's business (invariant 6): others do not see file names.
        "imports": (
            list(ImportBatch.objects.filter(project=project).order_by("-created_at")[:10])
            if is_lead
            else []
        ),
    }
    if role in (Role.LEAD, Role.ML):
        # Routing's card (``_routing_card.html``): leads and ML staff read it, leads route.
        context["routing_config"] = {
            "canRoute": is_lead,
            "api": {
                "routing": reverse("api-project-routing", args=[project.pk]),
                "run": reverse("api-project-routing-run", args=[project.pk]),
            },
        }
    if not is_lead:
        return render(request, "annotation/project_overview.html", context)
    context["chains_imported"] = chains_imported_count(project=project)
    context["snapshot"] = snapshot_get(project=project)
    context["training_snapshots"] = training_snapshots(project=project)
    # A format written from Monte-Carlo labels only for a snapshot that holds them (the
    # export refuses it otherwise, and a download link would fail without a word).
    with_monte_carlo = context["snapshot"] is not None and MachineSource.MONTE_CARLO in (
        snapshot_options(snapshot=context["snapshot"]).get("machine_sources") or []
    )
    context["export_formats"] = [
        (fmt, EXPORT_DESCRIPTIONS[fmt])
        for fmt in EXPORT_FORMATS
        if with_monte_carlo or fmt not in MONTE_CARLO_FORMATS
    ]
    context["config"] = {
        "projectId": project.pk,
        "api": {
            "dashboard": reverse("api-project-dashboard", args=[project.pk]),
            "machine_quality": reverse("api-project-machine-quality", args=[project.pk]),
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
    (``annotation.quality.api.review``); the page carries only the endpoints."""
    project = project_get_for_member(
        user=request.user, project_id=project_id, roles=page_roles("review-page")
    )
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
def chains_page(request: HttpRequest, project_id: int) -> HttpResponse:
    """``/projects/{id}/chains/`` (leads only: 403 for other members, 404 for
    non-members): the data manager, the project's chains filtered, searched and paged by
    the chains API (``annotation.chains.api.chains``); the page carries only the endpoints and
    the members to filter by."""
    project = project_get_for_member(
        user=request.user, project_id=project_id, roles=page_roles("chains-page")
    )
    config = {
        "projectId": project.pk,
        "api": {
            "chains": reverse("api-project-chains", args=[project.pk]),
            "bulkPreview": reverse("api-chains-bulk-preview", args=[project.pk]),
            "bulk": reverse("api-chains-bulk", args=[project.pk]),
        },
        "chainPage": reverse("chain-page", args=[project.pk, 0]).removesuffix("0/"),
    }
    members = project.memberships.select_related("user").order_by("user__username")
    context = {
        "project": project,
        "config": config,
        "members": members,
        "bulk_actions": BulkActionKind.choices,
        "evaluation_sets": EvaluationSet.objects.filter(project=project).order_by("name"),
        "sorts": CHAIN_SORT_CHOICES,
        "extra_labels_max": EXTRA_LABELS_MAX,
    }
    return render(request, "annotation/chains.html", context)


# The data manager's "Sort by" choices (the column headers sort too; a phone hides them).
CHAIN_SORT_CHOICES = [
    (f"{sign}{key}", f"{label}, {direction}")
    for key, label in (
        ("id", "chain"),
        ("status", "status"),
        ("passes", "passes"),
        ("agreement", "agreement"),
        ("prm_score", "PRM score"),
        ("prm_uncertainty", "uncertainty"),
    )
    for sign, direction in (("", "lowest first"), ("-", "highest first"))
]


@require_GET
@login_required
def chain_page(request: HttpRequest, project_id: int, chain_id: int) -> HttpResponse:
    """``/projects/{id}/chains/{chain_id}/`` (leads only): one chain's revisions, steps
    with ratings and PRM scores, leases with skip and flag reasons, and the unflag,
    requeue and mark-gold buttons, all through the API."""
    project = project_get_for_member(
        user=request.user, project_id=project_id, roles=page_roles("chains-page")
    )
    if not project.chains.filter(pk=chain_id).exists():
        raise Http404("No such chain in this project.")
    config = {
        "projectId": project.pk,
        "chainId": chain_id,
        "api": {
            "chain": reverse("api-chain", args=[chain_id]),
            "labels": reverse("api-chain-labels", args=[chain_id]),
            "unflag": reverse("api-chain-unflag", args=[chain_id]),
            "requeue": reverse("api-chain-requeue", args=[chain_id]),
            "goldMark": reverse("api-gold-mark", args=[project.pk]),
        },
    }
    return render(
        request,
        "annotation/chain.html",
        {"project": project, "config": config, "chain_id": chain_id},
    )


@require_GET
@login_required
def label_workspace(request: HttpRequest, project_id: int) -> HttpResponse:
    """The annotator workspace. The page carries only the project's settings; chains come
    from the queue API (``assignments/next/``), so the page and any other client see the
    same fields and nothing else (no gold or imported labels, no other annotators)."""
    project = project_get_for_member(
        user=request.user, project_id=project_id, roles=page_roles("label-workspace")
    )
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


@require_GET
@login_required
def history_page(request: HttpRequest, project_id: int) -> HttpResponse:
    """``/projects/{id}/history/`` (members; 404 for non-members): the chains the caller
    submitted, newest first, each reopened read-only on the page. A lead reads a member's
    with ``?annotator=<user id>`` (anyone else naming another member: 403). Entries and
    chains come from the history API (``annotation.labeling.api.history``); the page carries only
    the endpoints and whose history it is."""
    project = project_get_for_member(
        user=request.user, project_id=project_id, roles=page_roles("history-page")
    )
    raw = request.GET.get("annotator", "")
    # ASCII digits within a bigint, as the URL's id converter reads ids ("²".isdigit()).
    if raw and (not re.fullmatch(r"[0-9]{1,19}", raw) or int(raw) > BIGINT_MAX):
        raise Http404("No such member of this project.")
    user = cast("User", request.user)  # login_required lets only signed-in users through
    annotator = history_annotator_resolve(
        project=project, user=user, annotator_id=int(raw) if raw else None
    )
    own = annotator.pk == user.pk
    config = {
        "annotator": None if own else annotator.pk,
        "api": {
            "history": reverse("api-project-history", args=[project.pk]),
            # The prefix of /api/v1/projects/{id}/history/{annotation_id}/.
            "chain": reverse("api-project-history-chain", args=[project.pk, 0]).removesuffix("0/"),
        },
    }
    context = {"project": project, "config": config, "annotator": annotator, "own": own}
    return render(request, "annotation/history.html", context)


@require_GET
@login_required
def import_page(request: HttpRequest, project_id: int) -> HttpResponse:
    """``/projects/{id}/import/`` (leads only: 403 for other members, 404 for non-members):
    drop a file, follow its import job, then read its counts or its bad lines. The page
    uploads to the imports API and polls the job (``annotation.datasets.api.imports``); it carries
    only the endpoints, the formats and the size limit."""
    project = project_get_for_member(
        user=request.user, project_id=project_id, roles=page_roles("import-page")
    )
    config = {
        "api": {"imports": reverse("api-project-imports", args=[project.pk])},
        "maxBytes": settings.STEPLAB_IMPORT_MAX_UPLOAD_BYTES,
    }
    context = {"project": project, "config": config, "formats": IMPORT_FORMATS}
    return render(request, "annotation/import.html", context)


@require_GET
@login_required
def snapshots_page(request: HttpRequest, project_id: int) -> HttpResponse:
    """``/projects/{id}/snapshots/`` (leads only: 403 for other members, 404 for
    non-members): the dataset snapshots with their options and counts, the training runs'
    own listed apart, a form to take a new one and the diff between two versions.
    Everything goes through the snapshot and export API (``annotation.datasets.api``); the
    page carries only the endpoints and the defaults of the form."""
    project = project_get_for_member(
        user=request.user, project_id=project_id, roles=page_roles("snapshots-page")
    )
    config = {
        "projectId": project.pk,
        "api": {
            "snapshots": reverse("api-project-snapshots", args=[project.pk]),
            "diff": reverse("api-project-snapshot-diff", args=[project.pk]),
            "export": reverse("api-project-export", args=[project.pk]),
        },
    }
    return render(
        request,
        "annotation/snapshots.html",
        {
            "project": project,
            "config": config,
            "min_support_max": MIN_SUPPORT_MAX,
            "seed_max": SEED_MAX,
            "export_formats": [(fmt, EXPORT_DESCRIPTIONS[fmt]) for fmt in EXPORT_FORMATS],
            "machine_sources": MachineSource.choices,
        },
    )


@require_GET
@login_required
def tokens_page(request: HttpRequest) -> HttpResponse:
    """``/tokens/`` (every signed-in user, their own only): their API tokens, each with its
    scope, when it was made, last used and expires, and whether it still works; making a
    named read-only or full token (its key shown once) and revoking any, all through
    ``/api/v1/auth/tokens/``."""
    config = {
        "api": {
            "tokens": reverse("api-auth-tokens"),
            # The prefix of /api/v1/auth/tokens/{token_id}/.
            "token": reverse("api-auth-token-revoke", args=[0]).removesuffix("0/"),
        },
    }
    context = {
        "config": config,
        "lifetime_days": settings.STEPLAB_API_TOKEN_DAYS,
        "most_tokens": settings.STEPLAB_API_TOKENS_PER_USER,
    }
    return render(request, "annotation/tokens.html", context)
