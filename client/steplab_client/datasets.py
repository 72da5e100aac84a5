"""Data in and out, as ``Client`` groups: imports (upload a file, follow the job), chains
(the data manager's list, one chain, its labels) and snapshots (take one, download an
export streamed to a file, ``Download``)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from steplab_client.endpoints import ENDPOINTS
from steplab_client.errors import ApiError, SteplabError
from steplab_client.resource import JSON, Progress, Resource, clean, response_body

# Statuses that an import job never leaves.
IMPORT_FINISHED = frozenset({"done", "failed"})
DOWNLOAD_CHUNK_BYTES = 64 * 1024


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


class Imports(Resource):
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


class Chains(Resource):
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


_FILENAME = re.compile(r'filename="([^"]*)"')
# What is kept of the name a server gives its file: letters, digits, dot, dash, underscore.
_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_NAME_CHARS = 200


def download_filename(sent: str | None, *, fallback: str) -> str:
    """The name an export is saved under when ``--out`` names no file: the last part of
    the name the server sent, kept to letters, digits, ``.``, ``-`` and ``_``, never hidden
    (no leading dot) and never ``..``; ``fallback`` when nothing is left. The client never
    follows a path from the server, so a server answering ``filename="../../x"`` writes
    ``x`` inside the folder asked for.

    >>> [download_filename(s, fallback="export.trl") for s in ("../../x", "..", "a b.csv")]
    ['x', 'export.trl', 'a_b.csv']
    """
    last = re.split(r"[/\\]", sent or "")[-1]
    name = _UNSAFE_IN_NAME.sub("_", last).lstrip(".")[-_NAME_CHARS:]
    return name or fallback


class Snapshots(Resource):
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
            json=clean(options),
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
        name, made safe by ``download_filename``, in the folder or in the current folder
        when None), a block at a time: a large export never
        sits in memory. Written to ``<out>.part`` and renamed once complete, so a broken
        download leaves no file that looks whole. ``on_progress`` gets the bytes so far.
        ``provenance``: each record also names each step's label source and what each
        machine source said; ``soft_labels``: openrlhf's, from ``votes`` or
        ``monte_carlo`` values. ``kind``: what ``snapshot`` numbers, ``dataset`` (the
        server's default) or ``training`` (a training run's own, t<N>)."""
        project_id = self._client.projects.resolve(project)
        found = ENDPOINTS["export"]
        url = found.url(project_id=project_id)
        params = clean(
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
                        body=response_body(response),
                    )
                named = _FILENAME.search(response.headers.get("content-disposition", ""))
                filename = download_filename(
                    named.group(1) if named else None, fallback=f"export.{format}"
                )
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
