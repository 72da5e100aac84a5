"""An invitation opened by someone not signed in, for the single sign-on tests of joining
with local passwords off (through the OIDC provider or the directory)."""

from __future__ import annotations

from django.test import Client

from annotation.models import Role
from annotation.projects.invite_lists import InviteRow
from annotation.projects.invites import invites_create
from tests.factories import MembershipFactory, ProjectFactory


def invitation_opened(*, email: str) -> Client:
    """A lead of a new project no group maps to ("Unmapped") invites ``email``; the
    returned client has opened the link, so ``/invite/`` shows that invitation."""
    project = ProjectFactory(name="Unmapped")
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    (issued,) = invites_create(
        project=project,
        invited_by=lead,
        rows=[InviteRow(line=1, email=email)],
        days=7,
        link_base="http://testserver/invite/",
    )
    client = Client()
    client.post("/invite/", {"action": "open", "token": issued.link.split("#", 1)[1]})
    return client
