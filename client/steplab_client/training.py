"""The PRM loop as ``Client`` groups: the loop's settings, runs of every kind (training,
scoring, simulation, machine labels: start, list, follow, cancel, retry; evaluation runs
the same but retry) and model versions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from steplab_client.resource import JSON, Progress, Resource, clean

if TYPE_CHECKING:
    from steplab_client.client import Client

# Statuses that a run never leaves.
RUN_FINISHED = frozenset({"succeeded", "failed", "cancelled"})


class TrainingSettings(Resource):
    def show(self, project: int | str) -> JSON:
        result: JSON = self._client.request(
            "training_settings.show", project_id=self._client.projects.resolve(project)
        )
        return result

    def update(self, project: int | str, **settings: Any) -> JSON:
        result: JSON = self._client.request(
            "training_settings.update",
            project_id=self._client.projects.resolve(project),
            json=settings,
        )
        return result


class Runs(Resource):
    """Runs of every kind: one lifecycle (queued, running, then succeeded, failed or
    cancelled), the same calls. Evaluation runs have no retry: starting one again asks
    for what a retry would measure, every figure still missing."""

    def __init__(self, client: Client, kind: str, id_name: str) -> None:
        super().__init__(client)
        self._kind = kind
        self._id_name = id_name

    def list(self, project: int | str) -> list[JSON]:
        """The project's latest runs, newest first."""
        result: list[JSON] = self._client.request(
            f"{self._kind}.list", project_id=self._client.projects.resolve(project)
        )
        return result

    def start(self, project: int | str, **settings: Any) -> JSON:
        """Queue a run; ``settings`` as the API's for this kind of run."""
        result: JSON = self._client.request(
            f"{self._kind}.start",
            project_id=self._client.projects.resolve(project),
            json=clean(settings),
        )
        return result

    def show(self, run_id: int) -> JSON:
        result: JSON = self._client.request_at(f"{self._kind}.show", {self._id_name: run_id})
        return result

    def cancel(self, run_id: int) -> JSON:
        """A queued run ends at once, a running one within about a second."""
        result: JSON = self._client.request_at(f"{self._kind}.cancel", {self._id_name: run_id})
        return result

    def follow(
        self, run_id: int, *, on_progress: Progress | None = None, timeout: float | None = None
    ) -> JSON:
        """The run once it has finished, whichever way."""
        return self._client.follow(
            lambda: self.show(run_id),
            finished=RUN_FINISHED,
            on_progress=on_progress,
            timeout=timeout,
        )


class RetriedRuns(Runs):
    """Training, scoring, simulation and machine-label runs: a failed or cancelled one is
    retried with its settings."""

    def retry(self, run_id: int) -> JSON:
        """A new run with the same settings as a failed or cancelled one."""
        result: JSON = self._client.request_at(f"{self._kind}.retry", {self._id_name: run_id})
        return result


class ModelVersions(Resource):
    def list(self, project: int | str) -> list[JSON]:
        result: list[JSON] = self._client.request(
            "model_versions.list", project_id=self._client.projects.resolve(project)
        )
        return result

    def activate(self, version_id: int) -> JSON:
        """Make a version the one that scores and orders the queue (ML staff)."""
        result: JSON = self._client.request("model_versions.activate", version_id=version_id)
        return result
