"""Read paths shared by the API, the pages and the commands."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import AnonymousUser, User
from django.db.models import QuerySet
from django.http import Http404

from annotation.models import Membership, Project, Role


def project_list_for_user(*, user: User | AnonymousUser) -> QuerySet[Project]:
    """Projects the user belongs to. Superusers see every project."""
    if not user.is_authenticated:
        return Project.objects.none()
    if user.is_superuser:
        return Project.objects.all()
    return Project.objects.filter(memberships__user=user).distinct()


def project_create_allowed(*, user: User | AnonymousUser) -> bool:
    """Who may create projects: site staff (``is_staff``). The API's create, the
    "New project" page and the home page's button all ask this."""
    return bool(user.is_authenticated and user.is_staff)


def membership_role(*, user: User | AnonymousUser, project: Project) -> str | None:
    """The user's role in the project, or None. A superuser counts as a lead everywhere."""
    if not user.is_authenticated:
        return None
    if user.is_superuser:
        return Role.LEAD
    return (
        Membership.objects.filter(project=project, user=user).values_list("role", flat=True).first()
    )


def project_get_for_member(
    *,
    user: User | AnonymousUser,
    project_id: int | str,
    roles: Iterable[str] | None = None,
) -> Project:
    """The project if ``user`` is a member (with one of ``roles`` when given).

    A project the user does not belong to raises Http404, not 403: its existence is not
    revealed. A member without the needed role gets PermissionDenied."""
    from django.core.exceptions import PermissionDenied

    try:
        project = Project.objects.get(pk=int(project_id))
    except (Project.DoesNotExist, ValueError, TypeError):
        raise Http404("No such project.") from None
    role = membership_role(user=user, project=project)
    if role is None:
        raise Http404("No such project.")
    if roles is not None and role not in set(roles) and not user.is_superuser:
        raise PermissionDenied("Your role in this project does not allow this.")
    return project


def project_resolve(*, ref: str) -> Project:
    """A project by id or by name, for the command line."""
    if ref.isdigit():
        project = Project.objects.filter(pk=int(ref)).first()
        if project is not None:
            return project
    project = Project.objects.filter(name=ref).first()
    if project is None:
        raise Project.DoesNotExist(f"No project with id or name {ref!r}.")
    return project
