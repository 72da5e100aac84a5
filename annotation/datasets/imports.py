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
the commit-time checks leave little to overlap), so reading stays in line."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from annotation.datasets.importers.formats import (
    DETECT_HEAD_BYTES,
    FORMATS,
    detect_format,
    iter_chains,
)
from annotation.datasets.importers.records import (
    LineError,
    ParsedChain,
    ParsedProblem,
    content_hash,
)
from annotation.models import (
    Annotation,
    AnnotationSource,
    Chain,
    ImportBatch,
    Problem,
    Project,
    Step,
    StepRating,
)

# Chains parsed and written per round: large enough that the per-chunk statements vanish
# in the COPY time, small enough that a chunk (~20k steps) is a few MB of memory.
CHUNK_CHAINS = 2_000
# A file with millions of bad lines must not hold them all in memory: keep the first ones
# and count the rest.
MAX_KEPT_ERRORS = 10_000
# pg_advisory_xact_lock key space of imports: (namespace << 32) | project id.
_IMPORT_LOCK_NAMESPACE = 0x53544C

_GENERATOR_MAX = Chain._meta.get_field("generator").max_length or 200
_SOURCE_NAME_MAX = Annotation._meta.get_field("source_name").max_length or 100
_FILENAME_MAX = ImportBatch._meta.get_field("filename").max_length or 500
_LABELS = frozenset((-1, 0, 1, None))


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


@dataclass(frozen=True, slots=True)
class ChainLimits:
    """The per-chain limits an import enforces (see STEPLAB_IMPORT_MAX_* in settings)."""

    max_steps: int
    max_step_chars: int
    max_problem_chars: int

    @classmethod
    def from_settings(cls) -> ChainLimits:
        return cls(
            max_steps=settings.STEPLAB_IMPORT_MAX_STEPS,
            max_step_chars=settings.STEPLAB_IMPORT_MAX_STEP_CHARS,
            max_problem_chars=settings.STEPLAB_IMPORT_MAX_PROBLEM_CHARS,
        )


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
    carries as import annotations (never a person's: they do not count toward
    ``Chain.finished_count``).

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
    digest = _file_sha256(source=source)
    fmt = _format_resolve(source=source, fmt=fmt)

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
) -> _Totals:
    """Read ``source`` chunk by chunk and write its chains into ``batch``; the totals.
    Raises ImportRejected with the first ``MAX_KEPT_ERRORS`` bad lines when any line is
    bad (the caller's transaction then rolls back what was written), or when the file
    holds no chains."""
    importer = _ChunkImporter(
        project=project, writer=_writer_for(project=project, batch=batch, now=timezone.now())
    )
    errors: list[LineError] = []
    error_count = records = 0
    limits = ChainLimits.from_settings()
    for chunk in _chunks_read(source=source, fmt=fmt, step_split=project.step_split, limits=limits):
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


# --- reading -------------------------------------------------------------------------


@contextmanager
def _opened(source: Path | BinaryIO) -> Iterator[BinaryIO]:
    """The file at its start: a path is opened (and closed again), a file object is
    rewound and left open for its owner."""
    if isinstance(source, Path):
        with source.open("rb") as stream:
            yield stream
    else:
        source.seek(0)
        yield source


def _file_sha256(*, source: Path | BinaryIO) -> str:
    digest = hashlib.sha256()
    with _opened(source) as stream:
        while block := stream.read(1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


def _format_resolve(*, source: Path | BinaryIO, fmt: str) -> str:
    if fmt == "auto":
        with _opened(source) as stream:
            return detect_format(stream.read(DETECT_HEAD_BYTES))
    if fmt not in FORMATS:
        raise ValueError(f"Unknown format {fmt!r}; use auto or one of {', '.join(FORMATS)}.")
    return fmt


@dataclass(frozen=True, slots=True)
class _Row:
    """A parsed chain that passed the database's own limits, with its hashes."""

    chain: ParsedChain
    chain_hash: str
    problem_hash: str
    meta_json: str


@dataclass(frozen=True, slots=True)
class _Chunk:
    rows: list[_Row]
    errors: list[LineError]
    problems: list[_NewProblem] = field(default_factory=list)


def _chunks_read(
    *, source: Path | BinaryIO, fmt: str, step_split: str, limits: ChainLimits
) -> Iterator[_Chunk]:
    """The file's records, parsed and checked, CHUNK_CHAINS at a time."""
    with _opened(source) as stream:
        rows: list[_Row] = []
        errors: list[LineError] = []
        problems: list[_NewProblem] = []
        for record in iter_chains(stream, fmt, step_split=step_split):
            prepared: _Row | _NewProblem | LineError
            if isinstance(record, ParsedChain):
                prepared = _row_prepare(chain=record, limits=limits)
            elif isinstance(record, ParsedProblem):
                prepared = _problem_prepare(problem=record, limits=limits)
            else:
                prepared = record
            if isinstance(prepared, LineError):
                errors.append(prepared)
            elif isinstance(prepared, _NewProblem):
                problems.append(prepared)
            else:
                rows.append(prepared)
            if len(rows) + len(problems) + len(errors) >= CHUNK_CHAINS:
                yield _Chunk(rows=rows, errors=errors, problems=problems)
                rows, errors, problems = [], [], []
        if rows or errors or problems:
            yield _Chunk(rows=rows, errors=errors, problems=problems)


def _json_default(value: object) -> object:
    # ijson hands numbers over as Decimal.
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _row_prepare(*, chain: ParsedChain, limits: ChainLimits) -> _Row | LineError:
    """Checks what the parsers leave to the database and to the queue. PostgreSQL text
    cannot hold NUL or an unpaired surrogate, and a COPY that fails on one aborts the
    whole file with a message that names no line: caught here, it is a LineError like
    any other. So is a chain too big to lease and submit (``limits``)."""
    line, steps, labels = chain.line, chain.steps, chain.labels
    if not chain.problem.strip():
        return LineError(line=line, record=chain.record, reason="problem: empty")
    if not steps:
        return LineError(line=line, record=chain.record, reason="steps: no steps")
    too_big = _limit_exceeded(chain=chain, limits=limits)
    if too_big:
        return LineError(line=line, record=chain.record, reason=too_big)
    if labels is not None:
        if len(labels) != len(steps):
            return LineError(
                line=line,
                record=chain.record,
                reason=f"labels: {len(labels)} labels for {len(steps)} steps",
            )
        if not _LABELS.issuperset(labels):
            index, label = next((i, x) for i, x in enumerate(labels) if x not in _LABELS)
            return LineError(
                line=line,
                record=chain.record,
                reason=f"labels[{index}]: {label!r} is not -1, 0 or 1",
            )
    if len(chain.generator) > _GENERATOR_MAX:
        return LineError(
            line=line,
            record=chain.record,
            reason=f"generator: longer than {_GENERATOR_MAX} characters",
        )
    if len(chain.label_source) > _SOURCE_NAME_MAX:
        return LineError(
            line=line,
            record=chain.record,
            reason=f"label source: longer than {_SOURCE_NAME_MAX} characters",
        )
    others = chain.answer + chain.reference_answer + chain.generator
    if "\x00" in others or "\x00" in chain.problem or any("\x00" in step for step in steps):
        return LineError(line=line, record=chain.record, reason="text contains a NUL character")
    try:
        chain_hash = content_hash(chain.problem, steps)
        problem_hash = hashlib.sha256(chain.problem.encode("utf-8")).hexdigest()
        others.encode("utf-8")
    except UnicodeEncodeError:
        return LineError(
            line=line, record=chain.record, reason="text holds an unpaired UTF-16 surrogate"
        )
    meta_json = "{}"
    if chain.meta:
        try:
            meta_json = json.dumps(chain.meta, ensure_ascii=False, default=_json_default)
            meta_json.encode("utf-8")
        except (TypeError, ValueError):
            return LineError(
                line=line, record=chain.record, reason="meta: not representable as JSON"
            )
        if "\\u0000" in meta_json:
            return LineError(
                line=line, record=chain.record, reason="meta: contains a NUL character"
            )
    return _Row(chain=chain, chain_hash=chain_hash, problem_hash=problem_hash, meta_json=meta_json)


def _problem_prepare(*, problem: ParsedProblem, limits: ChainLimits) -> _NewProblem | LineError:
    """A problem of a problems file, checked as a chain's problem is (``_row_prepare``)."""
    line, record = problem.line, problem.record
    for name, text in (
        ("problem", problem.problem),
        ("reference_answer", problem.reference_answer),
    ):
        if len(text) > limits.max_problem_chars:
            return LineError(
                line=line,
                record=record,
                reason=f"{name}: {len(text):,} characters; at most "
                f"{limits.max_problem_chars:,} (STEPLAB_IMPORT_MAX_PROBLEM_CHARS)",
            )
        if "\x00" in text:
            return LineError(line=line, record=record, reason="text contains a NUL character")
    try:
        digest = hashlib.sha256(problem.problem.encode("utf-8")).hexdigest()
        problem.reference_answer.encode("utf-8")
    except UnicodeEncodeError:
        return LineError(line=line, record=record, reason="text holds an unpaired UTF-16 surrogate")
    return _NewProblem(
        content_hash=digest, text=problem.problem, reference_answer=problem.reference_answer
    )


def _limit_exceeded(*, chain: ParsedChain, limits: ChainLimits) -> str | None:
    """Why the chain is over a limit, or None."""
    steps = chain.steps
    if len(steps) > limits.max_steps:
        return (
            f"steps: {len(steps):,} steps; a chain may have at most {limits.max_steps:,} "
            "(STEPLAB_IMPORT_MAX_STEPS)"
        )
    for index, text in enumerate(steps):
        if len(text) > limits.max_step_chars:
            return (
                f"steps[{index}]: {len(text):,} characters; a step may have at most "
                f"{limits.max_step_chars:,} (STEPLAB_IMPORT_MAX_STEP_CHARS)"
            )
    for name, text in (
        ("problem", chain.problem),
        ("answer", chain.answer),
        ("reference_answer", chain.reference_answer),
    ):
        if len(text) > limits.max_problem_chars:
            return (
                f"{name}: {len(text):,} characters; at most {limits.max_problem_chars:,} "
                "(STEPLAB_IMPORT_MAX_PROBLEM_CHARS)"
            )
    return None


# --- writing -------------------------------------------------------------------------


@dataclass
class _Totals:
    chains: int = 0
    duplicates: int = 0
    steps: int = 0
    labels: int = 0
    problems: int = 0
    problems_duplicate: int = 0


@dataclass(frozen=True, slots=True)
class _NewProblem:
    content_hash: str
    text: str
    reference_answer: str


class _ChunkWriter(Protocol):
    def chains_existing(self, *, hashes: Sequence[str]) -> set[str]:
        """Which of these chain content hashes the project holds."""
        ...

    def problems_existing(self, *, hashes: Sequence[str]) -> dict[str, tuple[int, str]]:
        """(id, reference answer) by content hash, of those the project holds."""
        ...

    def problems_insert(self, *, problems: Sequence[_NewProblem]) -> dict[str, int]:
        """Insert the problems; their ids by content hash."""
        ...

    def chains_insert(self, *, rows: Sequence[_Row], problem_ids: dict[str, int]) -> int:
        """Insert the chains, their steps and their import annotations; the rating count."""
        ...


def _writer_for(*, project: Project, batch: ImportBatch, now: datetime) -> _ChunkWriter:
    if connection.vendor == "postgresql":
        return _CopyWriter(project=project, batch=batch, now=now)
    return _OrmWriter(project=project, batch=batch)


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


class _HashKeys:
    """64-bit keys of the content hashes this import has written. It only answers "not
    written by this import" for certain, so the database is asked about the rest; that
    spares a lookup per chunk in the common case (new chains into a new project) for a
    few MB per 100,000 chains, where holding the full hashes would take several times
    that."""

    def __init__(self) -> None:
        self._keys: set[int] = set()

    @staticmethod
    def _key(hash_hex: str) -> int:
        return int(hash_hex[:16], 16)

    def add(self, hashes: Iterable[str]) -> None:
        self._keys.update(map(self._key, hashes))

    def __contains__(self, hash_hex: str) -> bool:
        return self._key(hash_hex) in self._keys


@dataclass
class _ChunkImporter:
    """Deduplication and problem resolution around a writer, chunk after chunk.

    Needs the import lock: the "project had no chains before" shortcut relies on nobody
    else adding chains meanwhile (only imports add chains; were anything else to, the
    unique constraints would still fail the import rather than let a duplicate in)."""

    project: Project
    writer: _ChunkWriter
    totals: _Totals = field(default_factory=_Totals)
    chains_written: _HashKeys = field(default_factory=_HashKeys)
    problems_written: _HashKeys = field(default_factory=_HashKeys)

    def __post_init__(self) -> None:
        self.project_had_chains = Chain.objects.filter(project=self.project).exists()
        self.project_had_problems = Problem.objects.filter(project=self.project).exists()

    def write(self, *, rows: list[_Row]) -> None:
        hashes = {row.chain_hash for row in rows}
        asked = [h for h in hashes if self.project_had_chains or h in self.chains_written]
        known = self.writer.chains_existing(hashes=asked) if asked else set()
        fresh: list[_Row] = []
        for row in rows:
            if row.chain_hash in known:
                self.totals.duplicates += 1
                continue
            known.add(row.chain_hash)
            fresh.append(row)
        if not fresh:
            return
        problem_ids = self._problems_resolve(rows=fresh)
        self.totals.labels += self.writer.chains_insert(rows=fresh, problem_ids=problem_ids)
        self.chains_written.add(row.chain_hash for row in fresh)
        self.totals.chains += len(fresh)
        self.totals.steps += sum(len(row.chain.steps) for row in fresh)

    def write_problems(self, *, problems: list[_NewProblem]) -> None:
        """Insert the problems of a problems file the project does not hold (by content
        hash, as a chain's problem); one it holds, or repeated in the file, is a
        duplicate, whose empty reference answer the file's fills."""
        wanted: dict[str, _NewProblem] = {}
        for problem in problems:
            if problem.content_hash in wanted:
                self.totals.problems_duplicate += 1
            else:
                wanted[problem.content_hash] = problem
        asked = [h for h in wanted if self.project_had_problems or h in self.problems_written]
        existing = self.writer.problems_existing(hashes=asked) if asked else {}
        self.totals.problems_duplicate += len(existing)
        to_fill = [
            Problem(pk=problem_id, reference_answer=wanted[key].reference_answer)
            for key, (problem_id, reference) in existing.items()
            if wanted[key].reference_answer and not reference
        ]
        if to_fill:
            Problem.objects.bulk_update(to_fill, ["reference_answer"])
        new = [problem for key, problem in wanted.items() if key not in existing]
        if new:
            self.writer.problems_insert(problems=new)
            self.problems_written.add(problem.content_hash for problem in new)
            self.totals.problems += len(new)

    def _problems_resolve(self, *, rows: Sequence[_Row]) -> dict[str, int]:
        """Ids of the rows' problems by content hash, inserting the new ones. A reference
        answer fills a problem's empty one; it never replaces one already set."""
        wanted: dict[str, _NewProblem] = {}
        for row in rows:
            seen = wanted.get(row.problem_hash)
            if seen is None or (not seen.reference_answer and row.chain.reference_answer):
                wanted[row.problem_hash] = _NewProblem(
                    content_hash=row.problem_hash,
                    text=row.chain.problem,
                    reference_answer=row.chain.reference_answer,
                )
        asked = [h for h in wanted if self.project_had_problems or h in self.problems_written]
        existing = self.writer.problems_existing(hashes=asked) if asked else {}
        ids = {key: problem_id for key, (problem_id, _) in existing.items()}
        to_fill = [
            Problem(pk=problem_id, reference_answer=wanted[key].reference_answer)
            for key, (problem_id, reference) in existing.items()
            if wanted[key].reference_answer and not reference
        ]
        if to_fill:
            Problem.objects.bulk_update(to_fill, ["reference_answer"])
        new = [problem for key, problem in wanted.items() if key not in ids]
        if new:
            ids.update(self.writer.problems_insert(problems=new))
            self.problems_written.add(problem.content_hash for problem in new)
        return ids


def _ratings(chain: ParsedChain) -> list[tuple[int, int]]:
    """(step index, rating) for every labeled step; unlabeled steps get no row."""
    if chain.labels is None:
        return []
    return [(index, label) for index, label in enumerate(chain.labels) if label is not None]


class _CopyTable:
    """COPY into one model's table. The caller names the columns it sets; every other
    NOT NULL column gets the model field's default (Django keeps defaults in Python, not
    in the schema), so a field added later with a default does not break the import."""

    def __init__(
        self,
        model: type[models.Model],
        columns: Sequence[str],
        *,
        now: datetime,
        db: BaseDatabaseWrapper,
    ) -> None:
        meta = model._meta
        extra_columns: list[str] = []
        extra_values: list[Any] = []
        for model_field in meta.concrete_fields:
            if model_field.column in columns or model_field.primary_key:
                continue
            if getattr(model_field, "auto_now", False) or getattr(
                model_field, "auto_now_add", False
            ):
                value: Any = now
            elif model_field.has_default():
                value = model_field.get_default()
            # Field.has_db_default is Django's (5.0), missing from django-stubs.
            elif model_field.null or model_field.has_db_default():  # type: ignore[attr-defined]
                continue
            else:
                value = model_field.get_default()
                if value is None:
                    raise TypeError(
                        f"{meta.db_table}.{model_field.column} is NOT NULL without a default: "
                        "the COPY import must set it"
                    )
            extra_columns.append(model_field.column)
            extra_values.append(model_field.get_db_prep_save(value, db))
        quoted = ", ".join(db.ops.quote_name(name) for name in (*columns, *extra_columns))
        self.sql = f"COPY {db.ops.quote_name(meta.db_table)} ({quoted}) FROM STDIN"
        self.extra = tuple(extra_values)

    def copy(self, cursor: Any, rows: Iterable[tuple[Any, ...]]) -> None:
        with cursor.copy(self.sql) as copy:
            if self.extra:
                extra = self.extra
                for row in rows:
                    copy.write_row(row + extra)
            else:
                for row in rows:
                    copy.write_row(row)


class _CopyWriter:
    """PostgreSQL: ids from the sequences, rows through COPY."""

    def __init__(self, *, project: Project, batch: ImportBatch, now: datetime) -> None:
        self.project = project
        self.batch = batch
        tables: dict[str, tuple[type[models.Model], tuple[str, ...]]] = {
            "problem": (Problem, ("id", "project_id", "text", "reference_answer", "content_hash")),
            "chain": (
                Chain,
                (
                    "id",
                    "project_id",
                    "problem_id",
                    "import_batch_id",
                    "content_hash",
                    "final_answer",
                    "generator",
                    "meta",
                    "step_count",
                ),
            ),
            "step": (Step, ("chain_id", "index", "text")),
            "step_with_id": (Step, ("id", "chain_id", "index", "text")),
            "annotation": (
                Annotation,
                ("id", "chain_id", "source", "source_name", "import_batch_id"),
            ),
            "rating": (StepRating, ("annotation_id", "step_id", "rating")),
        }
        self.tables = {
            name: _CopyTable(model, columns, now=now, db=connection)
            for name, (model, columns) in tables.items()
        }
        self.sequences: dict[type[models.Model], str] = {}
        with connection.cursor() as cursor:
            for model in (Problem, Chain, Step, Annotation):
                cursor.execute(
                    "SELECT pg_get_serial_sequence(%s, %s)",
                    [model._meta.db_table, model._meta.pk.column],
                )
                self.sequences[model] = cursor.fetchone()[0]

    def _ids(self, cursor: Any, model: type[models.Model], count: int) -> list[int]:
        cursor.execute(
            "SELECT nextval(%s::regclass) FROM generate_series(1, %s)",
            [self.sequences[model], count],
        )
        return [row[0] for row in cursor.fetchall()]

    # One index probe per hash through LATERAL ... LIMIT 1: a plain `= ANY(...)` lets the
    # planner, with statistics gone stale during a big import, scan every chain of the
    # project through the project_id index instead.
    def chains_existing(self, *, hashes: Sequence[str]) -> set[str]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT wanted.hash FROM unnest(%s::text[]) AS wanted(hash) "
                f"CROSS JOIN LATERAL (SELECT 1 FROM {Chain._meta.db_table} AS c "
                "WHERE c.project_id = %s AND c.content_hash = wanted.hash LIMIT 1) AS found",
                [list(hashes), self.project.pk],
            )
            return {row[0] for row in cursor.fetchall()}

    def problems_existing(self, *, hashes: Sequence[str]) -> dict[str, tuple[int, str]]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT wanted.hash, found.id, found.reference_answer "
                "FROM unnest(%s::text[]) AS wanted(hash) "
                "CROSS JOIN LATERAL (SELECT p.id, p.reference_answer "
                f"FROM {Problem._meta.db_table} AS p "
                "WHERE p.project_id = %s AND p.content_hash = wanted.hash LIMIT 1) AS found",
                [list(hashes), self.project.pk],
            )
            return {key: (problem_id, reference) for key, problem_id, reference in cursor}

    def problems_insert(self, *, problems: Sequence[_NewProblem]) -> dict[str, int]:
        project_id = self.project.pk
        with connection.cursor() as django_cursor:
            cursor = django_cursor.cursor
            ids = self._ids(cursor, Problem, len(problems))
            self.tables["problem"].copy(
                cursor,
                (
                    (pk, project_id, problem.text, problem.reference_answer, problem.content_hash)
                    for pk, problem in zip(ids, problems, strict=True)
                ),
            )
        return {problem.content_hash: pk for pk, problem in zip(ids, problems, strict=True)}

    def chains_insert(self, *, rows: Sequence[_Row], problem_ids: dict[str, int]) -> int:
        project_id, batch_id = self.project.pk, self.batch.pk
        with connection.cursor() as django_cursor:
            cursor = django_cursor.cursor
            chain_ids = self._ids(cursor, Chain, len(rows))
            self.tables["chain"].copy(
                cursor,
                (
                    (
                        chain_id,
                        project_id,
                        problem_ids[row.problem_hash],
                        batch_id,
                        row.chain_hash,
                        row.chain.answer,
                        row.chain.generator,
                        row.meta_json,
                        len(row.chain.steps),
                    )
                    for chain_id, row in zip(chain_ids, rows, strict=True)
                ),
            )
            if not any(row.chain.labels for row in rows):
                # The common unlabeled case: the identity column numbers the steps, and
                # nothing needs their ids back.
                self.tables["step"].copy(
                    cursor,
                    (
                        (chain_id, index, text)
                        for chain_id, row in zip(chain_ids, rows, strict=True)
                        for index, text in enumerate(row.chain.steps)
                    ),
                )
                return 0
            # Ratings point at steps, so the steps' ids are taken up front too. They need
            # not be contiguous (another session may draw from the sequence meanwhile):
            # each chain remembers where its ids start in the list.
            step_ids = self._ids(cursor, Step, sum(len(row.chain.steps) for row in rows))
            offsets: list[int] = []
            step_rows: list[tuple[int, int, int, str]] = []
            for chain_id, row in zip(chain_ids, rows, strict=True):
                offsets.append(len(step_rows))
                for index, text in enumerate(row.chain.steps):
                    step_rows.append((step_ids[len(step_rows)], chain_id, index, text))
            self.tables["step_with_id"].copy(cursor, step_rows)
            del step_rows
            labeled = [
                (chain_id, offset, row)
                for chain_id, offset, row in zip(chain_ids, offsets, rows, strict=True)
                if _ratings(row.chain)
            ]
            annotation_ids = self._ids(cursor, Annotation, len(labeled))
            self.tables["annotation"].copy(
                cursor,
                (
                    (
                        annotation_id,
                        chain_id,
                        AnnotationSource.IMPORT.value,
                        row.chain.label_source or self.batch.format,
                        batch_id,
                    )
                    for annotation_id, (chain_id, _, row) in zip(
                        annotation_ids, labeled, strict=True
                    )
                ),
            )
            rating_rows = [
                (annotation_id, step_ids[offset + index], rating)
                for annotation_id, (_, offset, row) in zip(annotation_ids, labeled, strict=True)
                for index, rating in _ratings(row.chain)
            ]
            self.tables["rating"].copy(cursor, rating_rows)
        return len(rating_rows)


class _OrmWriter:
    """Any other database (SQLite for `make demo`): bulk_create in batches, ids read
    back by their unique keys so it does not depend on the backend returning them."""

    batch_size = 500

    def __init__(self, *, project: Project, batch: ImportBatch) -> None:
        self.project = project
        self.batch = batch

    def chains_existing(self, *, hashes: Sequence[str]) -> set[str]:
        return set(
            Chain.objects.filter(project=self.project, content_hash__in=hashes).values_list(
                "content_hash", flat=True
            )
        )

    def problems_existing(self, *, hashes: Sequence[str]) -> dict[str, tuple[int, str]]:
        return {
            key: (problem_id, reference)
            for key, problem_id, reference in Problem.objects.filter(
                project=self.project, content_hash__in=hashes
            ).values_list("content_hash", "id", "reference_answer")
        }

    def problems_insert(self, *, problems: Sequence[_NewProblem]) -> dict[str, int]:
        Problem.objects.bulk_create(
            [
                Problem(
                    project=self.project,
                    text=problem.text,
                    reference_answer=problem.reference_answer,
                    content_hash=problem.content_hash,
                )
                for problem in problems
            ],
            batch_size=self.batch_size,
        )
        return {
            key: problem_id
            for key, (problem_id, _) in self.problems_existing(
                hashes=[problem.content_hash for problem in problems]
            ).items()
        }

    def chains_insert(self, *, rows: Sequence[_Row], problem_ids: dict[str, int]) -> int:
        Chain.objects.bulk_create(
            [
                Chain(
                    project=self.project,
                    problem_id=problem_ids[row.problem_hash],
                    import_batch=self.batch,
                    content_hash=row.chain_hash,
                    final_answer=row.chain.answer,
                    generator=row.chain.generator,
                    meta=json.loads(row.meta_json),
                    step_count=len(row.chain.steps),
                )
                for row in rows
            ],
            batch_size=self.batch_size,
        )
        chain_ids = dict(
            Chain.objects.filter(
                project=self.project, content_hash__in=[row.chain_hash for row in rows]
            ).values_list("content_hash", "id")
        )
        Step.objects.bulk_create(
            [
                Step(chain_id=chain_ids[row.chain_hash], index=index, text=text)
                for row in rows
                for index, text in enumerate(row.chain.steps)
            ],
            batch_size=self.batch_size,
        )
        labeled = [row for row in rows if _ratings(row.chain)]
        if not labeled:
            return 0
        labeled_chain_ids = [chain_ids[row.chain_hash] for row in labeled]
        Annotation.objects.bulk_create(
            [
                Annotation(
                    chain_id=chain_ids[row.chain_hash],
                    source=AnnotationSource.IMPORT,
                    source_name=row.chain.label_source or self.batch.format,
                    import_batch=self.batch,
                )
                for row in labeled
            ],
            batch_size=self.batch_size,
        )
        annotation_ids = dict(
            Annotation.objects.filter(
                import_batch=self.batch, chain_id__in=labeled_chain_ids
            ).values_list("chain_id", "id")
        )
        step_ids = {
            (chain_id, index): step_id
            for step_id, chain_id, index in Step.objects.filter(
                chain_id__in=labeled_chain_ids
            ).values_list("id", "chain_id", "index")
        }
        ratings = [
            StepRating(
                annotation_id=annotation_ids[chain_ids[row.chain_hash]],
                step_id=step_ids[(chain_ids[row.chain_hash], index)],
                rating=rating,
            )
            for row in labeled
            for index, rating in _ratings(row.chain)
        ]
        StepRating.objects.bulk_create(ratings, batch_size=self.batch_size)
        return len(ratings)
