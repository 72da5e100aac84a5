"""``Client``: Steplab's REST API (/api/v1/) as Python calls, one group of methods per
resource (``client.projects.list()``, ``client.imports.upload(...)``,
``client.training_runs.start(...)``). Answers are the API's JSON, as dicts; errors are
``ApiError`` (the status and the server's message). Every URL comes from
``endpoints.ENDPOINTS``, which the test suite checks against the server's schema."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import httpx

from steplab_client.accounts import Invites, Members, Projects, Tokens
from steplab_client.config import settings_resolve
from steplab_client.datasets import Chains, Imports, Snapshots
from steplab_client.endpoints import ENDPOINTS
from steplab_client.errors import ApiError, SteplabError
from steplab_client.resource import JSON, Progress, clean, response_body
from steplab_client.training import ModelVersions, RetriedRuns, Runs, TrainingSettings
from steplab_client.webhooks import Webhooks

USER_AGENT = "steplab-client/0.1"
# How long a read waits between tries when the server is unreachable.
RETRY_WAIT_SECONDS = 2.0


def _retry_after(response: httpx.Response) -> float:
    """The server's Retry-After in seconds (its number form), within 1 to 30."""
    try:
        seconds = float(response.headers.get("retry-after", RETRY_WAIT_SECONDS))
    except ValueError:
        seconds = RETRY_WAIT_SECONDS
    return min(max(seconds, 1.0), 30.0)


class Client:
    """A session with one Steplab server as one user (their API token).

    ``url`` and ``token`` (or ``token_file``, a file holding it) default to STEPLAB_URL
    and STEPLAB_TOKEN (or STEPLAB_TOKEN_FILE), then to the config file
    (``steplab_client.config``). ``poll_seconds`` is how often ``follow`` asks;
    ``retry_seconds`` how long a read is retried while the server is unavailable."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        token_file: str | None = None,
        timeout: float = 60.0,
        poll_seconds: float = 1.0,
        retry_seconds: float = 120.0,
    ) -> None:
        settings = settings_resolve(url=url, token=token, token_file=token_file)
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
        self.training_runs = RetriedRuns(self, "training_runs", "run_id")
        self.scoring_runs = RetriedRuns(self, "scoring_runs", "scoring_run_id")
        self.simulation_runs = RetriedRuns(self, "simulation_runs", "simulation_run_id")
        self.machine_label_runs = RetriedRuns(self, "machine_label_runs", "machine_label_run_id")
        self.evaluation_runs = Runs(self, "evaluation_runs", "evaluation_run_id")
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
                    params=clean(params or {}),
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
                status=response.status_code,
                method=found.method,
                path=url,
                body=response_body(response),
            )
        if response.status_code == 204 or not response.content:
            return None
        return response_body(response)

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
            status=response.status_code,
            method=found.method,
            path=found.path,
            body=response_body(response),
        )
    return str(response.json()["token"])
