"""A project's webhooks as a ``Client`` group (``client.webhooks``): list, show, create,
update, delete, test, their delivery log and replays."""

from __future__ import annotations

from collections.abc import Sequence

from steplab_client.resource import JSON, Resource, Rows, clean


class Webhooks(Resource):
    """A project's webhooks and their delivery logs (leads)."""

    def _at(self, project: int | str, **ids: int) -> dict[str, int]:
        return {"project_id": self._client.projects.resolve(project), **ids}

    def list(self, project: int | str) -> list[JSON]:
        result: list[JSON] = self._client.request_at("webhooks.list", self._at(project))
        return result

    def show(self, project: int | str, webhook_id: int) -> JSON:
        result: JSON = self._client.request_at(
            "webhooks.show", self._at(project, webhook_id=webhook_id)
        )
        return result

    def create(
        self,
        project: int | str,
        *,
        url: str,
        events: Sequence[str],
        description: str | None = None,
        active: bool | None = None,
    ) -> JSON:
        """A new webhook; its ``secret`` (whsec_...) verifies the signatures it sends."""
        body = {"url": url, "events": list(events), "description": description, "active": active}
        result: JSON = self._client.request_at(
            "webhooks.create", self._at(project), json=clean(body)
        )
        return result

    def update(
        self,
        project: int | str,
        webhook_id: int,
        *,
        url: str | None = None,
        events: Sequence[str] | None = None,
        description: str | None = None,
        active: bool | None = None,
        rotate_secret: bool | None = None,
    ) -> JSON:
        """Change what is given (``active=False`` pauses it; ``rotate_secret=True`` makes
        a new secret, after which the old one verifies nothing)."""
        body = {
            "url": url,
            "events": None if events is None else [*events],
            "description": description,
            "active": active,
            "rotate_secret": rotate_secret,
        }
        result: JSON = self._client.request_at(
            "webhooks.update", self._at(project, webhook_id=webhook_id), json=clean(body)
        )
        return result

    def delete(self, project: int | str, webhook_id: int) -> None:
        """Delete the webhook and its delivery log."""
        self._client.request_at("webhooks.delete", self._at(project, webhook_id=webhook_id))

    def test(self, project: int | str, webhook_id: int) -> JSON:
        """Send a ``webhook.test`` message; its delivery, still pending (a worker sends it)."""
        result: JSON = self._client.request_at(
            "webhooks.test", self._at(project, webhook_id=webhook_id), json={}
        )
        return result

    def deliveries(self, project: int | str, webhook_id: int) -> Rows:
        """The delivery log, newest first."""
        project_id = self._client.projects.resolve(project)
        pages = self._client.pages(
            "webhooks.deliveries", project_id=project_id, webhook_id=webhook_id
        )
        return [*pages]

    def replay(self, project: int | str, webhook_id: int, delivery_id: int) -> JSON:
        """Send a delivery's message again (same ``webhook-id`` and payload): the new
        delivery; one still waiting for a retry is closed as replayed."""
        result: JSON = self._client.request_at(
            "webhooks.replay",
            self._at(project, webhook_id=webhook_id, delivery_id=delivery_id),
            json={},
        )
        return result
