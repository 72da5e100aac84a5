"""Importing chains from a file: the one write path behind the `import_chains` command and
the imports endpoint.

A file is imported whole or not at all (invariant 5): it is parsed and written in one
transaction, chunk by chunk so memory stays bounded for files of any size, and any bad
line rolls the whole transaction back. On PostgreSQL the rows go in through COPY, with
ids taken from the sequences beforehand so steps can point at their chain without a
round trip per row; other databases (SQLite for `make demo`) take the bulk_create path.

Where the time goes (100,000 chains x 10 steps): most of it is PostgreSQL's own work
for the rows (index entries, the deferred foreign-key checks at commit), the same as
for a bare COPY of those rows; the rest is parsing and hashing. A reader thread that
parsed ahead while the database worked was tried and measured no faster (the GIL and
the commit-time checks leave little to overlap), so reading stays in line.

Its parts, in the order a file goes through them: ``import_reading`` (hash, format, the
records parsed and checked chunk by chunk), ``import_dedupe`` (duplicates skipped,
problems shared), and the writers ``import_copy`` (PostgreSQL) and ``import_orm`` (any
other database); ``import_rows`` holds what passes between them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import BinaryIO

from django.contrib.auth.models import User
from django.db import connection, transaction
from django.utils import timezone

from annotation.datasets.import_copy import CopyWriter
from annotation.datasets.import_dedupe import ChunkImporter, ImportTotals
from annotation.datasets.import_orm import OrmWriter
from annotation.datasets.import_reading import (
    ChainLimits,
    chunks_read,
    file_sha256,
    format_resolve,
)
from annotation.datasets.import_rows import ChunkWriter
from annotation.datasets.importers.records import LineError
from annotation.models import ImportBatch, Project

# A file with millions of bad lines must not hold them all in memory: keep the first ones
# and count the rest.
MAX_KEPT_ERRORS = 10_000
# pg_advisory_xact_lock key space of imports: (namespace << 32) | project id.
_IMPORT_LOCK_NAMESPACE = 0x53544C

_FILENAME_MAX = ImportBatch._meta.get_field("filename").max_length or 500


@dataclass(frozen=True)
class ImportResult:
    batch_id: int | None
    filename: str
    format: str
    chains_created: int
    chains_duplicate: int
    steps_created: int
    labels_created: int
    already_imported: bool
    # A problems file (format "problems") adds problems, no chains.
    problems_created: int = 0
    problems_duplicate: int = 0


class ImportRejected(Exception):
    """The file had bad lines; nothing from it was written.

    ``errors`` holds the first MAX_KEPT_ERRORS bad lines in file order, ``error_count``
    all of them."""

    def __init__(
        self, *, errors: list[LineError], format: str, error_count: int | None = None
    ) -> None:
        self.errors = errors
        self.format = format
        self.error_count = len(errors) if error_count is None else error_count
        super().__init__(self.summary())

    def summary(self, *, limit: int = 20) -> str:
        noun = "bad line" if self.error_count == 1 else "bad lines"
        parts = [f"{self.error_count:,} {noun}"]
        parts += [f"{error.where}: {error.reason}" for error in self.errors[:limit]]
        if self.error_count > limit:
            parts.append(f"and {self.error_count - limit:,} more")
        return "; ".join(parts)


def chain_import(
    *,
    project: Project,
    path: str | Path | BinaryIO,
    filename: str | None = None,
    fmt: str = "auto",
    user: User | None = None,
    progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import every chain in the file at ``path`` into ``project``, with the labels it
    carries as import annotations and as machine labels of source "import"
    (``import_rows``; never a person's: neither counts toward ``Chain.finished_count``).

    ``path`` may also be a seekable binary file (an upload), read from its start.
    ``fmt`` is one of FORMATS or "auto". A file already imported into the project (same
    bytes) adds nothing and returns ``already_imported=True``. Chains already in the
    project, or repeated in the file, are counted as duplicates and skipped; problems are
    shared by text within the project.

    A chain over a limit of ``ChainLimits`` (more steps, or longer texts, than a lease
    and a submit can carry) is a bad line. Raises ImportRejected when any line is bad
    (nothing is written), FormatDetectionError (a ValueError) when "auto" cannot tell
    the format, ValueError for an unknown format and OSError for an unreadable file.
    ``progress(n)`` is called with the number of records read since its last call.

    Imports into one project are serialised (see ``_imports_lock``); they do not block
    the labeling queue."""
    source: Path | BinaryIO = Path(path) if isinstance(path, str | Path) else path
    filename = filename or (source.name if isinstance(source, Path) else "upload")
    digest = file_sha256(source=source)
    fmt = format_resolve(source=source, fmt=fmt)

    with transaction.atomic():
        _imports_lock(project=project)
        existing = ImportBatch.objects.filter(project=project, content_hash=digest).first()
        if existing is not None:
            return ImportResult(
                batch_id=existing.pk,
                filename=filename,
                format=existing.format,
                chains_created=0,
                chains_duplicate=0,
                steps_created=0,
                labels_created=0,
                already_imported=True,
            )
        batch = ImportBatch.objects.create(
            project=project,
            filename=filename[:_FILENAME_MAX],
            format=fmt,
            content_hash=digest,
            created_by=user,
        )
        totals = _import_chunks(
            source=source, fmt=fmt, project=project, batch=batch, progress=progress
        )
        batch.chains_created = totals.chains
        batch.chains_duplicate = totals.duplicates
        batch.steps_created = totals.steps
        batch.labels_created = totals.labels
        batch.save(
            update_fields=["chains_created", "chains_duplicate", "steps_created", "labels_created"]
        )
    return ImportResult(
        batch_id=batch.pk,
        filename=filename,
        format=fmt,
        chains_created=totals.chains,
        chains_duplicate=totals.duplicates,
        steps_created=totals.steps,
        labels_created=totals.labels,
        already_imported=False,
        problems_created=totals.problems,
        problems_duplicate=totals.problems_duplicate,
    )


def _import_chunks(
    *,
    source: Path | BinaryIO,
    fmt: str,
    project: Project,
    batch: ImportBatch,
    progress: Callable[[int], None] | None,
) -> ImportTotals:
    """Read ``source`` chunk by chunk and write its chains into ``batch``; the totals.
    Raises ImportRejected with the first ``MAX_KEPT_ERRORS`` bad lines when any line is
    bad (the caller's transaction then rolls back what was written), or when the file
    holds no chains."""
    importer = ChunkImporter(
        project=project, writer=_writer_for(project=project, batch=batch, now=timezone.now())
    )
    errors: list[LineError] = []
    error_count = records = 0
    limits = ChainLimits.from_settings()
    for chunk in chunks_read(source=source, fmt=fmt, step_split=project.step_split, limits=limits):
        records += len(chunk.rows)
        error_count += len(chunk.errors)
        errors.extend(chunk.errors[: max(0, MAX_KEPT_ERRORS - len(errors))])
        # After the first bad line nothing more is written (it will all be rolled back),
        # but the rest is still parsed so every bad line gets reported.
        records += len(chunk.problems)
        if chunk.rows and not error_count:
            importer.write(rows=chunk.rows)
        if chunk.problems and not error_count:
            importer.write_problems(problems=chunk.problems)
        if progress is not None:
            progress(len(chunk.rows) + len(chunk.problems) + len(chunk.errors))
    if error_count:
        raise ImportRejected(errors=errors, format=fmt, error_count=error_count)
    if records == 0:
        raise ImportRejected(
            errors=[LineError(line=1, reason="the file holds no chains")], format=fmt
        )
    return importer.totals


def _writer_for(*, project: Project, batch: ImportBatch, now: datetime) -> ChunkWriter:
    if connection.vendor == "postgresql":
        return CopyWriter(project=project, batch=batch, now=now)
    return OrmWriter(project=project, batch=batch)


def _imports_lock(*, project: Project) -> None:
    """Serialise imports into one project until the transaction ends, so two concurrent
    imports cannot both pass the duplicate checks and then collide on the unique
    constraints. An advisory lock, not a row lock on the project: FOR UPDATE on the
    project row would also block every lease and membership insert (their foreign key
    checks take KEY SHARE on it) for the whole import. SQLite serialises writers itself."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s)",
            [(_IMPORT_LOCK_NAMESPACE << 32) | (project.pk & 0xFFFFFFFF)],
        )
