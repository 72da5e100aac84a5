"""Django admin: a window onto the data for staff, not a second write path.

Labels, leases, steps and imported rows are read-only here. Editing them in place would
bypass the services that keep ``Chain.finished_count``/``is_finished`` and the overlap
true, and would overwrite labels, which invariant 1 forbids."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from annotation.api.permissions import request_user
from annotation.labeling.workspace import chain_flag_by_lead, chain_flag_clear
from annotation.models import (
    Annotation,
    ApiToken,
    Assignment,
    Chain,
    ImportBatch,
    Invite,
    Membership,
    Problem,
    Project,
    Screening,
    Step,
    StepRating,
)
from annotation.projects.services import chain_finished_recompute
from annotation.quality.gold import gold_mark, gold_unmark


class ReadOnlyAdminMixin:
    """View only: no add, change or delete, in lists and inlines alike."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["user"]
    fields = ["user", "role", "created_at"]
    readonly_fields = ["created_at"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = [
        "name",
        "labeling_mode",
        "overlap",
        "chain_total",
        "member_total",
        "created_by",
        "created_at",
    ]
    list_filter = ["labeling_mode", "step_split"]
    search_fields = ["name"]
    readonly_fields = ["created_by", "created_at"]
    inlines = [MembershipInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Project]:
        # Two to-many joins multiply rows, hence distinct counts.
        return (
            super()
            .get_queryset(request)
            .select_related("created_by")
            .annotate(
                _chains=Count("chains", distinct=True),
                _members=Count("memberships", distinct=True),
            )
        )

    @admin.display(description="chains", ordering="_chains")
    def chain_total(self, obj: Project) -> int:
        return obj._chains  # type: ignore[attr-defined]

    @admin.display(description="members", ordering="_members")
    def member_total(self, obj: Project) -> int:
        return obj._members  # type: ignore[attr-defined]

    def has_delete_permission(self, request: HttpRequest, obj: Project | None = None) -> bool:
        # Deleting a project deletes its labels; only allowed while it has none.
        if obj is not None and Annotation.objects.filter(chain__project=obj).exists():
            return False
        return super().has_delete_permission(request, obj)

    def save_model(self, request: HttpRequest, obj: Project, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request_user(request)
        super().save_model(request, obj, form, change)
        if change and "overlap" in form.changed_data:
            # The admin's save runs in one transaction that now holds the project row's
            # lock, as project_update does; the finished flags must follow the overlap.
            chain_finished_recompute(project=obj)


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ["user", "project", "role", "created_at"]
    list_filter = ["role", "project"]
    search_fields = ["user__username", "project__name"]
    autocomplete_fields = ["user", "project"]
    list_select_related = ["user", "project"]


@admin.register(Invite)
class InviteAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Who was invited where, and what became of it. Made and revoked on the members
    page; the link's selector and hash are left out (they open nothing without the
    link, but have no use here)."""

    list_display = [
        "project",
        "email",
        "user",
        "role",
        "invited_by",
        "created_at",
        "expires_at",
        "accepted_by",
        "accepted_at",
        "revoked_at",
    ]
    list_filter = ["role", "project"]
    search_fields = ["email", "user__username", "name", "project__name"]
    list_select_related = ["project", "user", "invited_by", "accepted_by"]
    exclude = ["selector", "token_hash"]


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Every user's API tokens, to see and revoke (delete); made on each user's /tokens/
    page. The key's hash and the password digest are left out: they have no use here."""

    list_display = ["user", "name", "scope", "prefix", "created_at", "last_used_at", "expires_at"]
    list_filter = ["scope"]
    search_fields = ["user__username", "name", "prefix"]
    list_select_related = ["user"]
    exclude = ["key_hash", "password_mark"]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.has_perm("annotation.delete_apitoken"))


@admin.register(ImportBatch)
class ImportBatchAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "filename",
        "project",
        "format",
        "chains_created",
        "chains_duplicate",
        "steps_created",
        "labels_created",
        "created_by",
        "created_at",
    ]
    list_filter = ["format", "project"]
    search_fields = ["filename", "content_hash"]
    list_select_related = ["project", "created_by"]


@admin.register(Problem)
class ProblemAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["id", "short_text", "project", "reference_answer", "created_at"]
    list_filter = ["project"]
    search_fields = ["text", "reference_answer"]
    list_select_related = ["project"]

    @admin.display(description="text")
    def short_text(self, obj: Problem) -> str:
        return obj.text[:100]


class StepInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = Step
    fields = readonly_fields = ("index", "text")
    extra = 0
    ordering = ["index"]


@admin.register(Chain)
class ChainAdmin(admin.ModelAdmin):
    """Only the priority may be changed by hand; the flag (a broken chain out of the queue)
    goes through the actions below, which record who flagged or cleared it and when.
    Everything else is import data or kept by the services."""

    list_display = [
        "id",
        "project",
        "generator",
        "step_count",
        "priority",
        "finished_count",
        "is_finished",
        "is_flagged",
        "is_gold",
        "created_at",
    ]
    list_filter = ["project", "is_finished", "is_flagged", "is_gold", "generator"]
    search_fields = ["problem__text", "final_answer", "content_hash"]
    list_select_related = ["project"]
    readonly_fields = [
        "project",
        "problem",
        "import_batch",
        "content_hash",
        "final_answer",
        "generator",
        "meta",
        "step_count",
        "finished_count",
        "is_finished",
        # Gold goes through the actions below (annotation/quality/gold.py), which set
        # the answer key and keep the finished counts right.
        "is_gold",
        "gold_annotation",
        "created_at",
        # Through the flag actions (annotation/labeling/workspace.py), which record who.
        "is_flagged",
        "flagged_by",
        "flag_reason",
        "flagged_at",
        "flag_cleared_by",
        "flag_cleared_at",
    ]
    inlines = [StepInline]
    actions = ["mark_gold", "unmark_gold", "flag_chains", "clear_flags"]

    def _by_project(self, queryset: QuerySet[Chain]) -> dict[Project, list[int]]:
        grouped: dict[Project, list[int]] = {}
        for chain in queryset.select_related("project"):
            grouped.setdefault(chain.project, []).append(chain.pk)
        return grouped

    @admin.action(description="Mark the selected chains as gold")
    def mark_gold(self, request: HttpRequest, queryset: QuerySet[Chain]) -> None:
        marked = 0
        for project, chain_ids in self._by_project(queryset).items():
            try:
                marked += len(
                    gold_mark(project=project, chain_ids=chain_ids, actor=request_user(request))
                )
            except ValidationError as exc:
                self.message_user(request, f"{project}: {' '.join(exc.messages)}", messages.ERROR)
        if marked:
            self.message_user(request, f"{marked} chain(s) marked as gold.", messages.SUCCESS)

    @admin.action(description="Return the selected gold chains to ordinary work")
    def unmark_gold(self, request: HttpRequest, queryset: QuerySet[Chain]) -> None:
        unmarked = sum(
            len(gold_unmark(project=project, chain_ids=chain_ids, actor=request_user(request)))
            for project, chain_ids in self._by_project(queryset).items()
        )
        self.message_user(request, f"{unmarked} chain(s) are no longer gold.", messages.SUCCESS)

    @admin.action(description="Flag the selected chains as broken (out of the queue)")
    def flag_chains(self, request: HttpRequest, queryset: QuerySet[Chain]) -> None:
        flagged = 0
        for chain in queryset.filter(is_flagged=False):
            chain_flag_by_lead(
                chain=chain, user=request_user(request), reason="Flagged in the admin."
            )
            flagged += 1
        self.message_user(request, f"{flagged} chain(s) flagged.", messages.SUCCESS)

    @admin.action(description="Clear the flag of the selected chains (back in the queue)")
    def clear_flags(self, request: HttpRequest, queryset: QuerySet[Chain]) -> None:
        cleared = 0
        for chain in queryset.filter(is_flagged=True):
            chain_flag_clear(chain=chain, user=request_user(request))
            cleared += 1
        self.message_user(request, f"{cleared} flag(s) cleared.", messages.SUCCESS)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Chain | None = None) -> bool:
        return False  # a chain's deletion cascades to its labels (invariant 1)


class StepRatingInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = StepRating
    fields = readonly_fields = ("step", "rating", "comment")
    extra = 0


@admin.register(Annotation)
class AnnotationAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = [
        "id",
        "chain",
        "source",
        "source_name",
        "annotator",
        "supersedes",
        "duration_ms",
        "created_at",
    ]
    list_filter = ["source", "source_name", "chain__project"]
    search_fields = ["annotator__username", "source_name", "request_id"]
    list_select_related = ["annotator", "chain"]
    inlines = [StepRatingInline]


@admin.register(Assignment)
class AssignmentAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["id", "chain", "annotator", "project", "status", "created_at", "expires_at"]
    list_filter = ["status", "project"]
    search_fields = ["annotator__username"]
    list_select_related = ["annotator", "project", "chain"]


@admin.register(Screening)
class ScreeningAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Read only: a lead resets a screening through the gold API, which keeps the rules."""

    list_display = ["annotator", "project", "status", "chains", "step_accuracy", "decided_at"]
    list_filter = ["status", "project"]
    search_fields = ["annotator__username"]
    list_select_related = ["annotator", "project"]
