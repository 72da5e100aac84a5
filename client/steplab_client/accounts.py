"""The caller's tokens, projects, their members and invitations, as ``Client`` groups
(``client.tokens``, ``client.projects``, ``client.members``, ``client.invites``)."""

from __future__ import annotations

from typing import Any

from steplab_client.errors import SteplabError
from steplab_client.resource import JSON, Resource, clean


class Tokens(Resource):
    """The caller's own API tokens."""

    def list(self) -> list[JSON]:
        """Newest first, each with its state (active, expired, password_changed)."""
        result: list[JSON] = self._client.request("tokens.list")
        return result

    def create(self, *, name: str, scope: str = "full") -> JSON:
        """A new token (``scope`` read or full); its ``key`` is in this answer only."""
        result: JSON = self._client.request("tokens.create", json={"name": name, "scope": scope})
        return result

    def revoke(self, token_id: int) -> None:
        self._client.request("tokens.revoke", token_id=token_id)


class Projects(Resource):
    def list(self) -> list[JSON]:
        """The projects the caller belongs to, with their progress."""
        return list(self._client.pages("projects.list"))

    def resolve(self, project: int | str) -> int:
        """A project's id from its id or its exact name (among the caller's projects)."""
        if isinstance(project, int):
            return project
        if project.isdigit():
            return int(project)
        named = [row for row in self.list() if row["name"] == project]
        if len(named) != 1:
            found = "No project" if not named else f"{len(named)} projects"
            raise SteplabError(f"{found} named {project!r} among yours; give its id.")
        return int(named[0]["id"])

    def show(self, project: int | str) -> JSON:
        result: JSON = self._client.request("projects.show", project_id=self.resolve(project))
        return result

    def create(self, *, name: str, overlap: int, labeling_mode: str, **settings: Any) -> JSON:
        """A new project (staff only), the caller its lead; ``settings`` as the API's
        (guidelines, lease_minutes, step_split, consensus, gold_rate, ...)."""
        body = {"name": name, "overlap": overlap, "labeling_mode": labeling_mode, **settings}
        result: JSON = self._client.request("projects.create", json=clean(body))
        return result

    def update(self, project: int | str, **settings: Any) -> JSON:
        """Change a project's settings (leads); the project as it is now."""
        result: JSON = self._client.request(
            "projects.update", project_id=self.resolve(project), json=settings
        )
        return result


class Members(Resource):
    def list(self, project: int | str) -> list[JSON]:
        project_id = self._client.projects.resolve(project)
        return list(self._client.pages("members.list", project_id=project_id))

    def add(self, project: int | str, *, username: str, role: str) -> JSON:
        """Add an existing account (or set its role if already a member)."""
        result: JSON = self._client.request(
            "members.add",
            project_id=self._client.projects.resolve(project),
            json={"username": username, "role": role},
        )
        return result

    def set_role(self, project: int | str, *, user_id: int, role: str) -> JSON:
        result: JSON = self._client.request(
            "members.role",
            project_id=self._client.projects.resolve(project),
            user_id=user_id,
            json={"role": role},
        )
        return result

    def remove(self, project: int | str, *, user_id: int) -> None:
        self._client.request(
            "members.remove", project_id=self._client.projects.resolve(project), user_id=user_id
        )


class Invites(Resource):
    def list(self, project: int | str) -> list[JSON]:
        """The open invitations (pending or expired)."""
        project_id = self._client.projects.resolve(project)
        return list(self._client.pages("invites.list", project_id=project_id))

    def create(
        self,
        project: int | str,
        *,
        role: str,
        email: str | None = None,
        username: str | None = None,
        name: str | None = None,
        expires_in_days: int | None = None,
    ) -> JSON:
        """Invite one person by address or account; the answer holds the one-time link."""
        body = {
            "role": role,
            "email": email,
            "username": username,
            "name": name,
            "expires_in_days": expires_in_days,
        }
        result: JSON = self._client.request(
            "invites.create", project_id=self._client.projects.resolve(project), json=clean(body)
        )
        return result

    def bulk(
        self,
        project: int | str,
        *,
        text: str,
        role: str | None = None,
        expires_in_days: int | None = None,
    ) -> JSON:
        """Invite everyone on a list or in a CSV file's text, or nobody (an ApiError that
        names every bad line)."""
        body = {"text": text, "role": role, "expires_in_days": expires_in_days}
        result: JSON = self._client.request(
            "invites.bulk", project_id=self._client.projects.resolve(project), json=clean(body)
        )
        return result

    def revoke(self, project: int | str, *, invite_id: int) -> JSON:
        result: JSON = self._client.request(
            "invites.revoke",
            project_id=self._client.projects.resolve(project),
            invite_id=invite_id,
            json={},
        )
        return result
