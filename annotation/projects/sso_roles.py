"""Project roles from an identity provider's group claim, by that provider's role map
(an OIDC or SAML provider's own, or STEPLAB_LDAP_ROLE_MAP).

The provider is the source of truth for the projects its groups are mapped to: at every
sign-in the person is made a member of each such project with the mapped role, or their
role there is set to it. Projects no group of theirs maps to are left as they are, so a
lead still adds and removes people by hand there, and leaving a group takes no one out
of a project (a lead removes them on the members page)."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError

from annotation.models import Project, Role
from annotation.projects.services import membership_add

logger = logging.getLogger(__name__)

# When two of a person's groups map the same project to different roles, the first
# of these wins: a lead can do what an annotator can, ML staff train models.
_PRECEDENCE = (Role.LEAD, Role.ML, Role.ANNOTATOR)


def claim_groups(claims: dict[str, Any], claim: str) -> list[str]:
    """The claim's values as a list of strings: providers send a list, a single string,
    or (Keycloak's paths, "/lab/leads") strings with a leading slash, kept as sent."""
    value = claims.get(claim)
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [str(item) for item in value]
    return []


def mapped_roles(groups: list[str], role_map: dict[str, list[tuple[str, str]]]) -> dict[str, str]:
    """Project name -> role for these groups, by ``_PRECEDENCE`` where they disagree."""
    roles: dict[str, str] = {}
    for group in groups:
        for project, role in role_map.get(group, []):
            held = roles.get(project)
            if held is None or _PRECEDENCE.index(Role(role)) < _PRECEDENCE.index(Role(held)):
                roles[project] = role
    return roles


def group_roles_apply(
    *, user: User, groups: list[str], role_map: dict[str, list[tuple[str, str]]], source: str
) -> dict[str, str]:
    """Set ``user``'s role in every project their ``groups`` map to (an OIDC claim's
    values, or LDAP groups: annotation/sso_ldap.py); returns project name -> role as
    applied. A project named in the map that does not exist, or a change that would leave
    a project without its last lead, is logged and skipped: a sign-in never fails for
    it."""
    wanted = mapped_roles(groups, role_map)
    projects = {p.name: p for p in Project.objects.filter(name__in=list(wanted))}
    applied: dict[str, str] = {}
    for name, role in wanted.items():
        project = projects.get(name)
        if project is None:
            logger.warning("The %s role map names project %r, which does not exist.", source, name)
            continue
        try:
            membership_add(project=project, user=user, role=role)
        except ValidationError as exc:
            logger.warning("Role of %s in %r left as it was: %s", user, name, exc.messages)
            continue
        applied[name] = role
    return applied
