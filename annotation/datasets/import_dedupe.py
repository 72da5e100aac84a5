"""Deduplication and problem resolution of an import, chunk after chunk, around a
writer (``import_rows.ChunkWriter``: ``import_copy`` on PostgreSQL, ``import_orm``
elsewhere): a chain the project holds, or one repeated in the file, is counted and
skipped; problems are shared by text within the project."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from annotation.datasets.import_rows import ChunkWriter, ImportRow, NewProblem
from annotation.models import Chain, Problem, Project


@dataclass
class ImportTotals:
    """What an import wrote, and what it skipped as duplicates."""

    chains: int = 0
    duplicates: int = 0
    steps: int = 0
    labels: int = 0
    problems: int = 0
    problems_duplicate: int = 0


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
class ChunkImporter:
    """Deduplication and problem resolution around a writer, chunk after chunk.

    Needs the import lock: the "project had no chains before" shortcut relies on nobody
    else adding chains meanwhile (only imports add chains; were anything else to, the
    unique constraints would still fail the import rather than let a duplicate in)."""

    project: Project
    writer: ChunkWriter
    totals: ImportTotals = field(default_factory=ImportTotals)
    chains_written: _HashKeys = field(default_factory=_HashKeys)
    problems_written: _HashKeys = field(default_factory=_HashKeys)

    def __post_init__(self) -> None:
        self.project_had_chains = Chain.objects.filter(project=self.project).exists()
        self.project_had_problems = Problem.objects.filter(project=self.project).exists()

    def write(self, *, rows: list[ImportRow]) -> None:
        hashes = {row.chain_hash for row in rows}
        asked = [h for h in hashes if self.project_had_chains or h in self.chains_written]
        known = self.writer.chains_existing(hashes=asked) if asked else set()
        fresh: list[ImportRow] = []
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

    def write_problems(self, *, problems: list[NewProblem]) -> None:
        """Insert the problems of a problems file the project does not hold (by content
        hash, as a chain's problem); one it holds, or repeated in the file, is a
        duplicate, whose empty reference answer the file's fills."""
        wanted: dict[str, NewProblem] = {}
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

    def _problems_resolve(self, *, rows: Sequence[ImportRow]) -> dict[str, int]:
        """Ids of the rows' problems by content hash, inserting the new ones. A reference
        answer fills a problem's empty one; it never replaces one already set."""
        wanted: dict[str, NewProblem] = {}
        for row in rows:
            seen = wanted.get(row.problem_hash)
            if seen is None or (not seen.reference_answer and row.chain.reference_answer):
                wanted[row.problem_hash] = NewProblem(
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
