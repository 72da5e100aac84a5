"""What an import hands from its reading (``import_reading``) to its writing
(``import_dedupe``, and the writers ``import_copy`` and ``import_orm``): a checked chain
with its hashes, a checked problem, and the one interface both writers keep.

A chain's labels are written twice over by both writers, from the same ``chain_ratings``:
as the import annotation (what consensus counts by the project's ``import_labels`` rule)
and as machine labels of source "import" (``MachineLabel``, ``run_kind`` "import", the
batch as the run, the label source as the model), what pre-labels, routing and the
machine-quality figures read, as they read every machine source from that one table.
Never votes either way: neither counts toward the finished count."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from annotation.datasets.importers.records import ParsedChain


@dataclass(frozen=True, slots=True)
class ImportRow:
    """A parsed chain that passed the database's own limits, with its hashes."""

    chain: ParsedChain
    chain_hash: str
    problem_hash: str
    meta_json: str


@dataclass(frozen=True, slots=True)
class NewProblem:
    content_hash: str
    text: str
    reference_answer: str


class ChunkWriter(Protocol):
    def chains_existing(self, *, hashes: Sequence[str]) -> set[str]:
        """Which of these chain content hashes the project holds."""
        ...

    def problems_existing(self, *, hashes: Sequence[str]) -> dict[str, tuple[int, str]]:
        """(id, reference answer) by content hash, of those the project holds."""
        ...

    def problems_insert(self, *, problems: Sequence[NewProblem]) -> dict[str, int]:
        """Insert the problems; their ids by content hash."""
        ...

    def chains_insert(self, *, rows: Sequence[ImportRow], problem_ids: dict[str, int]) -> int:
        """Insert the chains, their steps, their import annotations and their import machine
        labels; the rating count."""
        ...


# What an import's machine labels name as their run (``MachineLabel.run_kind``; the run
# id is the import batch's).
IMPORT_RUN_KIND = "import"


def label_source_name(*, chain: ParsedChain, batch_format: str) -> str:
    """Where a chain's imported labels came from ("prm800k", a line's own ``label_source``):
    the import annotation's ``source_name`` and its machine labels' ``model``."""
    return chain.label_source or batch_format


def chain_ratings(chain: ParsedChain) -> list[tuple[int, int]]:
    """(step index, rating) for every labeled step; unlabeled steps get no row."""
    if chain.labels is None:
        return []
    return [(index, label) for index, label in enumerate(chain.labels) if label is not None]
