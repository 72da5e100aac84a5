"""Every request the client makes, in one table: its method and its path as the OpenAPI
schema (/api/schema/) writes it. The client builds its URLs from here only, so the test
suite can check each (method, path) against the live server's schema, and an API change
that breaks the client fails there rather than on a lab's machine."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # as in the schema: "/api/v1/projects/{project_id}/"

    def url(self, **params: int | str) -> str:
        return self.path.format(**params)


def _get(path: str) -> Endpoint:
    return Endpoint("GET", path)


def _post(path: str) -> Endpoint:
    return Endpoint("POST", path)


def _patch(path: str) -> Endpoint:
    return Endpoint("PATCH", path)


def _delete(path: str) -> Endpoint:
    return Endpoint("DELETE", path)


_V1 = "/api/v1"
_PROJECT = f"{_V1}/projects/{{project_id}}"
_WEBHOOK = f"{_PROJECT}/webhooks/{{webhook_id}}"

ENDPOINTS: dict[str, Endpoint] = {
    "auth.token": _post(f"{_V1}/auth/token/"),
    "tokens.list": _get(f"{_V1}/auth/tokens/"),
    "tokens.create": _post(f"{_V1}/auth/tokens/"),
    "tokens.revoke": _delete(f"{_V1}/auth/tokens/{{token_id}}/"),
    "projects.list": _get(f"{_V1}/projects/"),
    "projects.create": _post(f"{_V1}/projects/"),
    "projects.show": _get(f"{_PROJECT}/"),
    "projects.update": _patch(f"{_PROJECT}/"),
    "members.list": _get(f"{_PROJECT}/members/"),
    "members.add": _post(f"{_PROJECT}/members/"),
    "members.role": _patch(f"{_PROJECT}/members/{{user_id}}/"),
    "members.remove": _delete(f"{_PROJECT}/members/{{user_id}}/"),
    "invites.list": _get(f"{_PROJECT}/invites/"),
    "invites.create": _post(f"{_PROJECT}/invites/"),
    "invites.bulk": _post(f"{_PROJECT}/invites/bulk/"),
    "invites.revoke": _post(f"{_PROJECT}/invites/{{invite_id}}/revoke/"),
    "imports.create": _post(f"{_PROJECT}/imports/"),
    "imports.show": _get(f"{_PROJECT}/imports/{{job_id}}/"),
    "chains.list": _get(f"{_PROJECT}/chains/"),
    "chains.show": _get(f"{_V1}/chains/{{chain_id}}/"),
    "chains.labels": _get(f"{_V1}/chains/{{chain_id}}/labels/"),
    "snapshots.list": _get(f"{_PROJECT}/snapshots/"),
    "snapshots.create": _post(f"{_PROJECT}/snapshots/"),
    "export": _get(f"{_PROJECT}/export/"),
    "training_settings.show": _get(f"{_PROJECT}/training-settings/"),
    "training_settings.update": _patch(f"{_PROJECT}/training-settings/"),
    "training_runs.list": _get(f"{_PROJECT}/training-runs/"),
    "training_runs.start": _post(f"{_PROJECT}/training-runs/"),
    "training_runs.show": _get(f"{_V1}/training-runs/{{run_id}}/"),
    "training_runs.cancel": _post(f"{_V1}/training-runs/{{run_id}}/cancel/"),
    "training_runs.retry": _post(f"{_V1}/training-runs/{{run_id}}/retry/"),
    "model_versions.list": _get(f"{_PROJECT}/model-versions/"),
    "model_versions.activate": _post(f"{_V1}/model-versions/{{version_id}}/activate/"),
    "scoring_runs.list": _get(f"{_PROJECT}/scoring-runs/"),
    "scoring_runs.start": _post(f"{_PROJECT}/scoring-runs/"),
    "scoring_runs.show": _get(f"{_V1}/scoring-runs/{{scoring_run_id}}/"),
    "scoring_runs.cancel": _post(f"{_V1}/scoring-runs/{{scoring_run_id}}/cancel/"),
    "scoring_runs.retry": _post(f"{_V1}/scoring-runs/{{scoring_run_id}}/retry/"),
    "simulation_runs.list": _get(f"{_PROJECT}/simulation-runs/"),
    "simulation_runs.start": _post(f"{_PROJECT}/simulation-runs/"),
    "simulation_runs.show": _get(f"{_V1}/simulation-runs/{{simulation_run_id}}/"),
    "simulation_runs.cancel": _post(f"{_V1}/simulation-runs/{{simulation_run_id}}/cancel/"),
    "simulation_runs.retry": _post(f"{_V1}/simulation-runs/{{simulation_run_id}}/retry/"),
    "machine_label_runs.list": _get(f"{_PROJECT}/machine-label-runs/"),
    "machine_label_runs.start": _post(f"{_PROJECT}/machine-label-runs/"),
    "machine_label_runs.show": _get(f"{_V1}/machine-label-runs/{{machine_label_run_id}}/"),
    "machine_label_runs.cancel": _post(
        f"{_V1}/machine-label-runs/{{machine_label_run_id}}/cancel/"
    ),
    "machine_label_runs.retry": _post(f"{_V1}/machine-label-runs/{{machine_label_run_id}}/retry/"),
    "evaluation_runs.list": _get(f"{_PROJECT}/evaluation-runs/"),
    "evaluation_runs.start": _post(f"{_PROJECT}/evaluation-runs/"),
    "evaluation_runs.show": _get(f"{_V1}/evaluation-runs/{{evaluation_run_id}}/"),
    "evaluation_runs.cancel": _post(f"{_V1}/evaluation-runs/{{evaluation_run_id}}/cancel/"),
    "webhooks.list": _get(f"{_PROJECT}/webhooks/"),
    "webhooks.create": _post(f"{_PROJECT}/webhooks/"),
    "webhooks.show": _get(f"{_WEBHOOK}/"),
    "webhooks.update": _patch(f"{_WEBHOOK}/"),
    "webhooks.delete": _delete(f"{_WEBHOOK}/"),
    "webhooks.test": _post(f"{_WEBHOOK}/test/"),
    "webhooks.deliveries": _get(f"{_WEBHOOK}/deliveries/"),
    "webhooks.replay": _post(f"{_WEBHOOK}/deliveries/{{delivery_id}}/replay/"),
}
