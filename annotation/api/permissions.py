"""Access checks for the API. Every project-scoped endpoint resolves its project through
``project_for_request``, a thin wrapper over ``access.project_get_for_member``,
so the API and the pages apply the same rule (invariant 6): a non-member gets 404, a member
without the needed role 403."""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import User
from django.http import HttpRequest
from rest_framework.exceptions import NotAuthenticated
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from annotation.access import project_create_allowed, project_get_for_member
from annotation.models import Project, Role

# Role sets for ``project_for_request(roles=...)``. None means any member.
ANY_MEMBER: tuple[str, ...] | None = None
LEADS: tuple[str, ...] = (Role.LEAD,)
LEADS_AND_ML: tuple[str, ...] = (Role.LEAD, Role.ML)


def request_user(request: Request | HttpRequest) -> User:
    """The signed-in user of a request that authentication let through (DRF's
    IsAuthenticated is every endpoint's default; the admin signs staff in): typed as the
    user model the services take, never an AnonymousUser."""
    user = request.user
    if not isinstance(user, User):
        raise NotAuthenticated()
    return user


def project_for_request(
    *, request: Request, project_id: int | str, roles: Iterable[str] | None = ANY_MEMBER
) -> Project:
    """The project named in the URL if the caller may act on it.

    Raises Http404 for a project the caller does not belong to (its existence is not
    revealed) and PermissionDenied for a member without one of ``roles``; DRF turns
    both into 404 and 403."""
    return project_get_for_member(user=request.user, project_id=project_id, roles=roles)


class IsStaffUser(BasePermission):
    """Site staff (``is_staff``): the people who may create projects."""

    message = "Only staff users can create projects."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return project_create_allowed(user=request.user)
