"""Write paths for projects and their members. The API, the pages, the admin-free
commands (``seed_demo``) all go through these functions."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from annotation.guidelines import GuidelinesTooSlow, guidelines_digest, guidelines_html
from annotation.labeling.queue.closed_leases import closed_leases_sync
from annotation.models import (
    Assignment,
    AssignmentStatus,
    Chain,
    ConsensusMethod,
    ImportLabels,
    LabelingMode,
    MachineSource,
    Membership,
    Project,
    Role,
    StepSplit,
)
from annotation.routing.services import ROUTING_FIELDS, chains_route_enqueue_on_commit

# The settings a lead may change after creation. ``name`` is deliberately absent:
# commands and exports refer to projects by name.
PROJECT_UPDATABLE_FIELDS = (
    "name",
    "guidelines",
    "overlap",
    "labeling_mode",
    "lease_minutes",
    "step_split",
    "show_reference_answer",
    "leads_rule_own_labels",
    "import_labels",
    "consensus",
    "gold_rate",
    "screening_chains",
    "screening_pass_accuracy",
    "prelabels",
    "prelabel_source",
    "prelabel_holdout",
    *ROUTING_FIELDS,
)


def project_create(
    *,
    name: str,
    created_by: User,
    overlap: int = 1,
    labeling_mode: str = LabelingMode.ALL_STEPS,
    guidelines: str = "",
    lease_minutes: int = 30,
    step_split: str = StepSplit.NEWLINE,
    show_reference_answer: bool = True,
    leads_rule_own_labels: bool = False,
    import_labels: str = ImportLabels.FALLBACK,
    consensus: str = ConsensusMethod.MAJORITY,
    gold_rate: float = 0.0,
    screening_chains: int = 0,
    screening_pass_accuracy: float = 0.8,
    prelabels: bool = False,
    prelabel_source: str = MachineSource.JUDGE,
    prelabel_holdout: float = 0.1,
) -> Project:
    """Create a project and make ``created_by`` its lead.

    Who may create projects (staff) is the caller's check; this function only keeps the
    data consistent: a project never exists without a lead."""
    project = Project(
        name=name.strip(),
        overlap=overlap,
        labeling_mode=labeling_mode,
        guidelines=guidelines,
        lease_minutes=lease_minutes,
        step_split=step_split,
        show_reference_answer=show_reference_answer,
        leads_rule_own_labels=leads_rule_own_labels,
        import_labels=import_labels,
        consensus=consensus,
        gold_rate=gold_rate,
        screening_chains=screening_chains,
        screening_pass_accuracy=screening_pass_accuracy,
        prelabels=prelabels,
        prelabel_source=prelabel_source,
        prelabel_holdout=prelabel_holdout,
        created_by=created_by,
    )
    project.full_clean()
    project.guidelines_html = _guidelines_rendered(guidelines)
    project.guidelines_html_digest = guidelines_digest(guidelines)
    try:
        with transaction.atomic():
            project.save()
            Membership.objects.create(project=project, user=created_by, role=Role.LEAD)
    except IntegrityError as exc:
        # full_clean checked the name, but a concurrent create can win the race.
        raise ValidationError({"name": ["A project with this name already exists."]}) from exc
    return project


def project_update(*, project: Project, data: dict[str, Any]) -> Project:
    """Change a project's settings. Only keys of PROJECT_UPDATABLE_FIELDS are accepted.

    A changed overlap recomputes ``Chain.is_finished`` for every chain of the project in
    one UPDATE, so raising it puts chains back into the queue and lowering it takes them
    out. The project row is locked for the whole change so two concurrent updates
    cannot leave the flags computed from the losing overlap. A changed routing rule
    sends a routing pass once the change commits (``routing.services``)."""
    unknown = set(data) - set(PROJECT_UPDATABLE_FIELDS)
    if unknown:
        raise ValidationError(
            {field: ["This field cannot be changed."] for field in sorted(unknown)}
        )
    with transaction.atomic():
        locked = Project.objects.select_for_update().get(pk=project.pk)
        old_overlap = locked.overlap
        old_routing = [getattr(locked, field) for field in ROUTING_FIELDS]
        for field, value in data.items():
            setattr(locked, field, value)
        locked.full_clean()
        fields = list(data)
        if "guidelines" in data:
            locked.guidelines_html = _guidelines_rendered(locked.guidelines)
            locked.guidelines_html_digest = guidelines_digest(locked.guidelines)
            fields += ["guidelines_html", "guidelines_html_digest"]
        if fields:
            locked.save(update_fields=fields)
        if locked.overlap != old_overlap:
            chain_finished_recompute(project=locked)
        if [getattr(locked, field) for field in ROUTING_FIELDS] != old_routing:
            chains_route_enqueue_on_commit(project_id=locked.pk)
    return locked


def _guidelines_rendered(text: str) -> str:
    """The guidelines as HTML, to store with them; a ValidationError naming the time
    bound when they take too long to render (``annotation.guidelines``)."""
    try:
        return str(guidelines_html(text=text))
    except GuidelinesTooSlow as exc:
        raise ValidationError({"guidelines": [str(exc)]}) from None


def project_guidelines_html(*, project: Project) -> SafeString:
    """The project's guidelines as HTML for a page: the rendering stored when they were
    saved. Guidelines saved another way (the admin, a fixture) are rendered on their
    first view and stored then; ones that cannot be rendered in time are shown as text."""
    digest = guidelines_digest(project.guidelines)
    if project.guidelines_html_digest == digest:
        return mark_safe(project.guidelines_html)  # rendered with raw HTML off
    try:
        html = str(guidelines_html(text=project.guidelines))
    except GuidelinesTooSlow:
        html = f'<pre class="guidelines-text">{escape(project.guidelines)}</pre>'
    Project.objects.filter(pk=project.pk, guidelines=project.guidelines).update(
        guidelines_html=html, guidelines_html_digest=digest
    )
    return mark_safe(html)


def chain_finished_recompute(*, project: Project) -> int:
    """Set ``is_finished = finished_count >= overlap + extra_labels`` for every chain in a
    single UPDATE. Returns the number of rows touched.

    Call it inside the transaction that changed ``project.overlap`` (holding the project
    row lock), so a concurrent submit cannot compute the flag from the old overlap. The
    closed leases' ``chain_open`` follows (``closed_leases_sync``)."""
    touched = Chain.objects.filter(project=project).update(
        is_finished=Case(
            When(finished_count__gte=F("extra_labels") + project.overlap, then=Value(True)),
            default=Value(False),
        )
    )
    closed_leases_sync(leases=Assignment.objects.filter(project=project))
    return touched


def membership_add(*, project: Project, user: User, role: str) -> tuple[Membership, bool]:
    """Add ``user`` to the project with ``role``, or change the role of an existing member.
    Returns the membership and whether it was created.

    Running it twice with the same arguments changes nothing, which keeps ``seed_demo``
    idempotent. Demoting the last lead is refused: a project always has one."""
    if role not in Role.values:
        raise ValidationError({"role": [f"Unknown role {role!r}; use one of {Role.values}."]})
    with transaction.atomic():
        # Lock the project's memberships so two leads demoting each other at once
        # cannot both pass the last-lead check.
        memberships = list(Membership.objects.select_for_update().filter(project=project))
        existing = next((m for m in memberships if m.user_id == user.pk), None)
        if existing is None:
            try:
                with transaction.atomic():
                    membership = Membership.objects.create(project=project, user=user, role=role)
            except IntegrityError as exc:
                raise ValidationError(
                    {"username": ["This user was just added by someone else."]}
                ) from exc
            return membership, True
        _role_change(membership=existing, role=role, memberships=memberships)
        return existing, False


def membership_role_set(*, project: Project, user: User, role: str) -> Membership:
    """Change the role of ``user``, who must already be a member (``Membership.DoesNotExist``
    otherwise: a role change never adds anyone). Demoting the last lead is refused."""
    if role not in Role.values:
        raise ValidationError({"role": [f"Unknown role {role!r}; use one of {Role.values}."]})
    with transaction.atomic():
        # The same lock as membership_add: two leads demoting each other at once cannot
        # both pass the last-lead check.
        memberships = list(Membership.objects.select_for_update().filter(project=project))
        membership = next((m for m in memberships if m.user_id == user.pk), None)
        if membership is None:
            raise Membership.DoesNotExist(f"{user} is not a member of {project}.")
        _role_change(membership=membership, role=role, memberships=memberships)
        return membership


def membership_remove(*, project: Project, user: User) -> None:
    """Remove ``user`` from the project.

    Their annotations stay (invariant 1). Their live leases are expired so the places
    they held under the overlap go back to the queue at once instead of at expiry.
    The last lead cannot be removed."""
    with transaction.atomic():
        memberships = list(Membership.objects.select_for_update().filter(project=project))
        membership = next((m for m in memberships if m.user_id == user.pk), None)
        if membership is None:
            raise Membership.DoesNotExist(f"{user} is not a member of {project}.")
        if membership.role == Role.LEAD and _lead_count(memberships) == 1:
            raise ValidationError(
                {"user": ["This is the project's only lead; add another lead first."]}
            )
        membership.delete()
        Assignment.objects.filter(
            project=project, annotator=user, status=AssignmentStatus.ACTIVE
        ).update(status=AssignmentStatus.EXPIRED, finished_at=timezone.now())


def _role_change(*, membership: Membership, role: str, memberships: list[Membership]) -> None:
    """Precondition: ``memberships`` are the project's, locked FOR UPDATE."""
    if membership.role == role:
        return
    if membership.role == Role.LEAD and _lead_count(memberships) == 1:
        raise ValidationError(
            {"role": ["This is the project's only lead; add another lead first."]}
        )
    membership.role = role
    membership.save(update_fields=["role"])


def _lead_count(memberships: list[Membership]) -> int:
    return sum(1 for m in memberships if m.role == Role.LEAD)
