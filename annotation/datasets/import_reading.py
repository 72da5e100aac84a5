"""Reading an import's file: its hash and format, then its records parsed and checked,
CHUNK_CHAINS at a time (``chunks_read``). A record the database or the queue could not
take (NUL, an unpaired surrogate, a chain over a ``ChainLimits`` limit) is a LineError
here, so a bad line is reported by its number instead of failing the COPY later."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import BinaryIO

from django.conf import settings

from annotation.datasets.import_rows import ImportRow, NewProblem
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
from annotation.models import Annotation, Chain

# Chains parsed and written per round: large enough that the per-chunk statements vanish
# in the COPY time, small enough that a chunk (~20k steps) is a few MB of memory.
CHUNK_CHAINS = 2_000

_GENERATOR_MAX = Chain._meta.get_field("generator").max_length or 200
_SOURCE_NAME_MAX = Annotation._meta.get_field("source_name").max_length or 100
_LABELS = frozenset((-1, 0, 1, None))


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


def file_sha256(*, source: Path | BinaryIO) -> str:
    digest = hashlib.sha256()
    with _opened(source) as stream:
        while block := stream.read(1024 * 1024):
            digest.update(block)
    return digest.hexdigest()


def format_resolve(*, source: Path | BinaryIO, fmt: str) -> str:
    if fmt == "auto":
        with _opened(source) as stream:
            return detect_format(stream.read(DETECT_HEAD_BYTES))
    if fmt not in FORMATS:
        raise ValueError(f"Unknown format {fmt!r}; use auto or one of {', '.join(FORMATS)}.")
    return fmt


@dataclass(frozen=True, slots=True)
class ParsedChunk:
    """Up to CHUNK_CHAINS records of a file, checked: chains, problems, bad lines."""

    rows: list[ImportRow]
    errors: list[LineError]
    problems: list[NewProblem] = field(default_factory=list)


def chunks_read(
    *, source: Path | BinaryIO, fmt: str, step_split: str, limits: ChainLimits
) -> Iterator[ParsedChunk]:
    """The file's records, parsed and checked, CHUNK_CHAINS at a time."""
    with _opened(source) as stream:
        rows: list[ImportRow] = []
        errors: list[LineError] = []
        problems: list[NewProblem] = []
        for record in iter_chains(stream, fmt, step_split=step_split):
            prepared: ImportRow | NewProblem | LineError
            if isinstance(record, ParsedChain):
                prepared = _row_prepare(chain=record, limits=limits)
            elif isinstance(record, ParsedProblem):
                prepared = _problem_prepare(problem=record, limits=limits)
            else:
                prepared = record
            if isinstance(prepared, LineError):
                errors.append(prepared)
            elif isinstance(prepared, NewProblem):
                problems.append(prepared)
            else:
                rows.append(prepared)
            if len(rows) + len(problems) + len(errors) >= CHUNK_CHAINS:
                yield ParsedChunk(rows=rows, errors=errors, problems=problems)
                rows, errors, problems = [], [], []
        if rows or errors or problems:
            yield ParsedChunk(rows=rows, errors=errors, problems=problems)


def _json_default(value: object) -> object:
    # ijson hands numbers over as Decimal.
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _row_prepare(*, chain: ParsedChain, limits: ChainLimits) -> ImportRow | LineError:
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
    return ImportRow(
        chain=chain, chain_hash=chain_hash, problem_hash=problem_hash, meta_json=meta_json
    )


def _problem_prepare(*, problem: ParsedProblem, limits: ChainLimits) -> NewProblem | LineError:
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
    return NewProblem(
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
