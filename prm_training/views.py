"""The ML staff page. Thin: the same access check as the API, one template; the page's
script drives the REST API for everything that changes or moves."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from annotation.access import membership_role, project_get_for_member
from annotation.datasets.evaluation_set_reads import import_batches_markable
from annotation.models import Role
from annotation.navigation import page_roles
from prm_training.ml.config import AMBIGUOUS_RULES, CLASS_WEIGHTS, MODES
from prm_training.models import STRATEGY_SETTINGS, AcquisitionStrategy, MachineLabelRunKind
from prm_training.selectors import (
    model_version_active_get,
    project_training_settings_get,
)
from prm_training.services.backbones import (
    backbone_choices,
    backbone_root,
    step_head_backbone_choices,
)
from prm_training.services.machine_labels import machine_label_model_choices
from prm_training.services.simulation import simulation_node_limits
from prm_training.services.strategy import acquisition_strategy_resolve

# The start form's choices of items (the API's filters; a sampling run reads the first two).
MACHINE_LABEL_FILTERS = [
    ("without_chains", "Sampling: problems without chains"),
    ("without_labels", "Rollouts, judge: chains without such labels"),
    ("all", "All problems or chains"),
]


@require_GET
@login_required
def models_page(request: HttpRequest, project_id: int) -> HttpResponse:
    # Non-members get 404, annotators 403, leads a read-only page, ML staff all of it.
    project = project_get_for_member(
        user=request.user, project_id=project_id, roles=page_roles("project-models")
    )
    role = membership_role(user=request.user, project=project)
    can_manage = role == Role.ML or request.user.is_superuser
    # Leads hold imports out as evaluation sets here too, beside the figures on them.
    can_lead = role == Role.LEAD or request.user.is_superuser
    # Machine-label runs are started by ML staff and leads alike (they import chains).
    can_run_machines = can_manage or can_lead
    loop = project_training_settings_get(project=project)
    active = model_version_active_get(project=project)
    applied, why = acquisition_strategy_resolve(loop=loop, version=active)
    context = {
        "project": project,
        "can_manage": can_manage,
        "can_lead": can_lead,
        "markable_imports": import_batches_markable(project=project) if can_lead else [],
        "modes": MODES,
        "ambiguous_rules": AMBIGUOUS_RULES,
        "class_weights": CLASS_WEIGHTS,
        "strategies": AcquisitionStrategy.choices,
        "strategy_settings": STRATEGY_SETTINGS,
        "loop": loop,
        "applied_strategy": applied,
        "applied_why": why,
        "backbones": backbone_choices(project=project) if can_manage else [],
        "open_prms": step_head_backbone_choices() if can_manage else [],
        "backbone_root": backbone_root() if can_manage else "",
        "can_run_machines": can_run_machines,
        "machine_label_kinds": MachineLabelRunKind.choices,
        "machine_label_filters": MACHINE_LABEL_FILTERS,
        "machine_models": machine_label_model_choices(project=project) if can_run_machines else [],
        "simulation_limits": {
            name: limit.value for name, limit in simulation_node_limits().items()
        },
    }
    return render(request, "prm_training/models.html", context)
