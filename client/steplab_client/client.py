"""``Client``: Steplab's REST API (/api/v1/) as Python calls, one group of methods per
resource (``client.projects.list()``, ``client.imports.upload(...)``,
``client.training_runs.start(...)``). Answers are the API's JSON, as dicts; errors are
``ApiError`` (the status and the server's message). Every URL comes from
``endpoints.ENDPOINTS``, which the test suite checks against the server's schema."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from steplab_client.config import settings_resolve
from steplab_client.endpoints import ENDPOINTS
from steplab_client.errors import ApiError, SteplabError

JSON = dict[str, Any]
Rows = list[JSON]
Progress = Callable[[JSON], None]

# Statuses that an import job or a run never leaves.
IMPORT_FINISHED = frozenset({"done", "failed"})
RUN_FINISHED = frozenset({"succeeded", "failed", "cancelled"})
USER_AGENT = "steplab-client/0.1"
DOWNLOAD_CHUNK_BYTES = 64 * 1024
# How long a read waits between tries when the server is unreachable.
RETRY_WAIT_SECONDS = 2.0


@dataclass(frozen=True)
class Download:
    """An export written to ``path``: its size and the snapshot it came from (the
    server's X-Steplab-Snapshot headers)."""

    path: Path
    bytes: int
    filename: str
    snapshot_version: int | None
    snapshot_hash: str
    ambiguous: str
    # dataset or training (X-Steplab-Snapshot-Kind): the two kinds number apart.
    snapshot_kind: str = "dataset"

    @property
    def snapshot_label(self) -> str:
        """The version as the server's pages say it: v3 for a dataset, t3 for a
        training run's own snapshot."""
        return f"{'t' if self.snapshot_kind == 'training' else 'v'}{self.snapshot_version}"


def _retry_after(response: httpx.Response) -> float:
    """The server's Retry-After in seconds (its number form), within 1 to 30."""
    try:
        seconds = float(response.headers.get("retry-after", RETRY_WAIT_SECONDS))
    except ValueError:
        seconds = RETRY_WAIT_SECONDS
    return min(max(seconds, 1.0), 30.0)


def _body(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return response.text


def _clean(values: Mapping[str, Any]) -> JSON:
    """``values`` without the Nones: an option not given is not sent, so the server's
    default applies."""
    return {key: value for key, value in values.items() if value is not None}


class Client:
    """A session with one Steplab server as one user (their API token).

    ``url`` and ``token`` default to STEPLAB_URL and STEPLAB_TOKEN, then to the config
    file (``steplab_client.config``). ``poll_seconds`` is how often ``follow`` asks;
    ``retry_seconds`` how long a read is retried while the server is unavailable."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 60.0,
        poll_seconds: float = 1.0,
        retry_seconds: float = 120.0,
    ) -> None:
        settings = settings_resolve(url=url, token=token)
        self.url = settings.url
        self.poll_seconds = poll_seconds
        self.retry_seconds = retry_seconds
        self._reached = False
        self._http = httpx.Client(
            base_url=settings.url,
            headers={"Authorization": f"Token {settings.token}", "User-Agent": USER_AGENT},
            timeout=timeout,
        )
        self.tokens = Tokens(self)
        self.projects = Projects(self)
        self.members = Members(self)
        self.invites = Invites(self)
        self.imports = Imports(self)
        self.chains = Chains(self)
        self.snapshots = Snapshots(self)
        self.training_settings = TrainingSettings(self)
        self.training_runs = Runs(self, "training_runs", "run_id")
        self.scoring_runs = Runs(self, "scoring_runs", "scoring_run_id")
        self.simulation_runs = Runs(self, "simulation_runs", "simulation_run_id")
        self.machine_label_runs = Runs(self, "machine_label_runs", "machine_label_run_id")
        self.model_versions = ModelVersions(self)
        self.webhooks = Webhooks(self)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the plumbing every resource uses -------------------------------------------------

    def request(
        self,
        endpoint: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        files: Mapping[str, Any] | None = None,
        data: Mapping[str, Any] | None = None,
        **path: int | str,
    ) -> Any:
        """Call ``ENDPOINTS[endpoint]`` with its path parameters; the JSON answer (None
        for 204), or ApiError for an error status."""
        return self.request_at(endpoint, path, params=params, json=json, files=files, data=data)

    def request_at(
        self,
        endpoint: str,
        path: Mapping[str, int | str],
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        files: Mapping[str, Any] | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> Any:
        """``request`` with the path parameters as a mapping."""
        found = ENDPOINTS[endpoint]
        url = found.url(**path)
        # A read is asked again while the server says it is unavailable (its database
        # lost: 503 with Retry-After) or, once reached, is not, for up to ``retry_seconds``:
        # a run followed for an hour outlives a restart. A write is sent once, never
        # twice: the server may have done it.
        deadline = time.monotonic() + (self.retry_seconds if found.method == "GET" else 0)
        while True:
            try:
                response = self._http.request(
                    found.method,
                    url,
                    params=_clean(params or {}),
                    json=json,
                    files=files,
                    data=data,
                )
            except httpx.TransportError as exc:
                # A server never reached is a wrong URL, said at once.
                if not self._reached or time.monotonic() >= deadline:
                    raise SteplabError(f"Cannot reach {self.url}: {exc}") from None
                time.sleep(min(RETRY_WAIT_SECONDS, max(deadline - time.monotonic(), 0)))
                continue
            self._reached = True
            if response.status_code != 503 or time.monotonic() >= deadline:
                break
            time.sleep(min(_retry_after(response), max(deadline - time.monotonic(), 0)))
        if response.is_error:
            raise ApiError(
                status=response.status_code, method=found.method, path=url, body=_body(response)
            )
        if response.status_code == 204 or not response.content:
            return None
        return _body(response)

    def pages(
        self, endpoint: str, *, params: Mapping[str, Any] | None = None, **path: int | str
    ) -> Iterator[JSON]:
        """Every row of a paged list (``{count, next, results}``), page by page."""
        page = 1
        while True:
            # Page 1 unnamed: a list that takes filters answers its first page as it is.
            numbered = {"page": page} if page > 1 else {}
            body = self.request_at(endpoint, path, params={**(params or {}), **numbered})
            yield from body["results"]
            if not body.get("next"):
                return
            page += 1

    def follow(
        self,
        show: Callable[[], JSON],
        *,
        finished: frozenset[str],
        on_progress: Progress | None = None,
        timeout: float | None = None,
    ) -> JSON:
        """Ask ``show()`` every ``poll_seconds`` until its ``status`` is one of
        ``finished``; each answer goes to ``on_progress``. The last answer."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = show()
            if on_progress is not None:
                on_progress(state)
            if state.get("status") in finished:
                return state
            if deadline is not None and time.monotonic() > deadline:
                raise SteplabError(
                    f"Still {state.get('status')} after {timeout:g} s; follow it again later."
                )
            time.sleep(self.poll_seconds)


class _Resource:
    def __init__(self, client: Client) -> None:
        self._client = client


class Tokens(_Resource):
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


class Projects(_Resource):
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
        result: JSON = self._client.request("projects.create", json=_clean(body))
        return result

    def update(self, project: int | str, **settings: Any) -> JSON:
        """Change a project's settings (leads); the project as it is now."""
        result: JSON = self._client.request(
            "projects.update", project_id=self.resolve(project), json=settings
        )
        return result


class Members(_Resource):
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


class Invites(_Resource):
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
            "invites.create", project_id=self._client.projects.resolve(project), json=_clean(body)
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
            "invites.bulk", project_id=self._client.projects.resolve(project), json=_clean(body)
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


class Imports(_Resource):
    def upload(self, project: int | str, path: str | Path, *, format: str = "auto") -> JSON:
        """Upload a file of chains (leads); the queued import job. ``follow`` it."""
        path = Path(path)
        project_id = self._client.projects.resolve(project)
        with path.open("rb") as handle:
            result: JSON = self._client.request(
                "imports.create",
                project_id=project_id,
                files={"file": (path.name, handle, "application/octet-stream")},
                data={"format": format},
            )
        return result

    def show(self, project: int | str, job_id: int) -> JSON:
        result: JSON = self._client.request(
            "imports.show", project_id=self._client.projects.resolve(project), job_id=job_id
        )
        return result

    def follow(
        self,
        project: int | str,
        job_id: int,
        *,
        on_progress: Progress | None = None,
        timeout: float | None = None,
    ) -> JSON:
        """The job once done or failed (a failed job lists its bad lines in ``errors``)."""
        project_id = self._client.projects.resolve(project)
        return self._client.follow(
            lambda: self.show(project_id, job_id),
            finished=IMPORT_FINISHED,
            on_progress=on_progress,
            timeout=timeout,
        )


class Chains(_Resource):
    def page(self, project: int | str, **filters: Any) -> JSON:
        """One page of the data manager's list (leads): ``results`` and ``next_cursor``.
        Filters as the API's: status (a list), q, sort, annotator, reviewer, min_score,
        max_score, min_uncertainty, max_uncertainty, max_agreement, limit, cursor."""
        result: JSON = self._client.request(
            "chains.list", project_id=self._client.projects.resolve(project), params=filters
        )
        return result

    def list(self, project: int | str, **filters: Any) -> Iterator[JSON]:
        """Every chain that passes ``filters``, page after page."""
        project_id = self._client.projects.resolve(project)
        cursor: str | None = None
        while True:
            page = self.page(project_id, **filters, cursor=cursor)
            yield from page["results"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def show(self, chain_id: int) -> JSON:
        """One chain: its steps, status, PRM scores and leases (leads)."""
        result: JSON = self._client.request("chains.show", chain_id=chain_id)
        return result

    def labels(self, chain_id: int) -> JSON:
        """Every current label of a chain per step, the consensus and the revisions."""
        result: JSON = self._client.request("chains.labels", chain_id=chain_id)
        return result


_FILENAME = re.compile(r'filename="([^"]+)"')


class Snapshots(_Resource):
    def list(self, project: int | str, *, kind: str | None = None) -> list[JSON]:
        project_id = self._client.projects.resolve(project)
        return list(
            self._client.pages("snapshots.list", project_id=project_id, params={"kind": kind})
        )

    def create(self, project: int | str, **options: Any) -> JSON:
        """Freeze the consensus labels into a new snapshot (leads). Options as the
        API's: heldout_fraction, seed, ambiguous, finished_only, include_imported,
        min_support, ties, machine_sources."""
        result: JSON = self._client.request(
            "snapshots.create",
            project_id=self._client.projects.resolve(project),
            json=_clean(options),
        )
        return result

    def export(
        self,
        project: int | str,
        *,
        format: str,
        out: str | Path | None = None,
        split: str | None = None,
        snapshot: int | None = None,
        kind: str | None = None,
        ambiguous: str | None = None,
        provenance: bool = False,
        soft_labels: str | None = None,
        on_progress: Callable[[int], None] | None = None,
    ) -> Download:
        """Stream a snapshot's export to ``out`` (a file or a folder; the server's file
        name in the current folder when None), a block at a time: a large export never
        sits in memory. Written to ``<out>.part`` and renamed once complete, so a broken
        download leaves no file that looks whole. ``on_progress`` gets the bytes so far.
        ``provenance``: each record also names each step's label source and what each
        machine source said; ``soft_labels``: openrlhf's, from ``votes`` or
        ``monte_carlo`` values. ``kind``: what ``snapshot`` numbers, ``dataset`` (the
        server's default) or ``training`` (a training run's own, t<N>)."""
        project_id = self._client.projects.resolve(project)
        found = ENDPOINTS["export"]
        url = found.url(project_id=project_id)
        params = _clean(
            {
                "format": format,
                "split": split,
                "snapshot": snapshot,
                "kind": kind,
                "ambiguous": ambiguous,
                "provenance": "true" if provenance else None,
                "soft_labels": soft_labels,
            }
        )
        try:
            with self._client._http.stream(found.method, url, params=params) as response:
                if response.is_error:
                    response.read()
                    raise ApiError(
                        status=response.status_code,
                        method=found.method,
                        path=url,
                        body=_body(response),
                    )
                named = _FILENAME.search(response.headers.get("content-disposition", ""))
                filename = named.group(1) if named else f"export.{format}"
                target = Path(out) if out is not None else Path(filename)
                if target.is_dir():
                    target = target / filename
                written = _write_streamed(response, target, on_progress)
        except httpx.TransportError as exc:
            raise SteplabError(f"Cannot reach {self._client.url}: {exc}") from None
        version = response.headers.get("x-steplab-snapshot")
        return Download(
            path=target,
            bytes=written,
            filename=filename,
            snapshot_version=int(version) if version and version.isdigit() else None,
            snapshot_hash=response.headers.get("x-steplab-snapshot-hash", ""),
            ambiguous=response.headers.get("x-steplab-ambiguous", ""),
            snapshot_kind=response.headers.get("x-steplab-snapshot-kind", "dataset"),
        )


def _write_streamed(
    response: httpx.Response, target: Path, on_progress: Callable[[int], None] | None
) -> int:
    partial = target.with_name(target.name + ".part")
    written = 0
    try:
        with partial.open("wb") as handle:
            for chunk in response.iter_bytes(DOWNLOAD_CHUNK_BYTES):
                handle.write(chunk)
                written += len(chunk)
                if on_progress is not None:
                    on_progress(written)
        os.replace(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return written


class TrainingSettings(_Resource):
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


class Runs(_Resource):
    """Training, scoring and simulation runs: one lifecycle (queued, running, then
    succeeded, failed or cancelled), the same calls."""

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
            json=_clean(settings),
        )
        return result

    def show(self, run_id: int) -> JSON:
        result: JSON = self._client.request_at(f"{self._kind}.show", {self._id_name: run_id})
        return result

    def cancel(self, run_id: int) -> JSON:
        """A queued run ends at once, a running one within about a second."""
        result: JSON = self._client.request_at(f"{self._kind}.cancel", {self._id_name: run_id})
        return result

    def retry(self, run_id: int) -> JSON:
        """A new run with the same settings as a failed or cancelled one."""
        result: JSON = self._client.request_at(f"{self._kind}.retry", {self._id_name: run_id})
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


class ModelVersions(_Resource):
    def list(self, project: int | str) -> list[JSON]:
        result: list[JSON] = self._client.request(
            "model_versions.list", project_id=self._client.projects.resolve(project)
        )
        return result

    def activate(self, version_id: int) -> JSON:
        """Make a version the one that scores and orders the queue (ML staff)."""
        result: JSON = self._client.request("model_versions.activate", version_id=version_id)
        return result


class Webhooks(_Resource):
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
            "webhooks.create", self._at(project), json=_clean(body)
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
            "webhooks.update", self._at(project, webhook_id=webhook_id), json=_clean(body)
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


def token_create(*, url: str, username: str, password: str, timeout: float = 60.0) -> str:
    """A new full-access API token ("Token sign-in") for ``username``, from a password:
    the one call made without a token."""
    found = ENDPOINTS["auth.token"]
    try:
        response = httpx.post(
            url.rstrip("/") + found.path,
            json={"username": username, "password": password},
            headers={"User-Agent": USER_AGENT},
            timeout=timeout,
        )
    except httpx.TransportError as exc:
        raise SteplabError(f"Cannot reach {url}: {exc}") from None
    if response.is_error:
        raise ApiError(
            status=response.status_code, method=found.method, path=found.path, body=_body(response)
        )
    return str(response.json()["token"])
