"""Admin for the PRM loop. Loop settings are editable (their training config is checked by
the same rules as the API); runs and versions are read here and changed through the
services (the ML page, the API, the commands), so the admin never publishes a version or
skips the one-active-version rule."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.http import HttpRequest

from prm_training.models import ModelVersion, ProjectTrainingSettings, ScoringRun, TrainingRun
from prm_training.services.training_settings import training_config_clean


class ProjectTrainingSettingsForm(forms.ModelForm):
    class Meta:
        model = ProjectTrainingSettings
        fields = [
            "project",
            "acquisition_strategy",
            "random_fraction",
            "retrain_every_n_finished",
            "default_config",
        ]

    def clean_default_config(self) -> dict[str, Any]:
        config = self.cleaned_data.get("default_config") or {}
        if not isinstance(config, dict):
            raise ValidationError("Must be a JSON object of training settings.")
        project = self.cleaned_data.get("project")
        if project is None:
            raise ValidationError("Choose the project first.")
        try:
            return training_config_clean(config=config, project=project)
        except ValidationError as exc:
            raise ValidationError(
                [f"{name}: {' '.join(messages)}" for name, messages in exc.message_dict.items()]
            ) from None


@admin.register(ProjectTrainingSettings)
class ProjectTrainingSettingsAdmin(admin.ModelAdmin):
    form = ProjectTrainingSettingsForm
    list_display = [
        "project",
        "acquisition_strategy",
        "random_fraction",
        "retrain_every_n_finished",
        "updated_at",
    ]
    list_select_related = ["project"]
    search_fields = ["project__name"]


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written only by the services: shown, never added, changed or deleted here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(TrainingRun)
class TrainingRunAdmin(ReadOnlyAdmin):
    list_display = ["id", "project", "status", "trigger", "progress", "created_at", "finished_at"]
    list_filter = ["status", "trigger"]
    list_select_related = ["project"]
    search_fields = ["project__name"]


@admin.register(ModelVersion)
class ModelVersionAdmin(ReadOnlyAdmin):
    list_display = ["id", "project", "version", "is_active", "created_at"]
    list_filter = ["is_active"]
    list_select_related = ["project"]
    search_fields = ["project__name"]


@admin.register(ScoringRun)
class ScoringRunAdmin(ReadOnlyAdmin):
    list_display = ["id", "project", "status", "strategy", "chains_scored", "created_at"]
    list_filter = ["status", "strategy"]
    list_select_related = ["project"]
    search_fields = ["project__name"]
