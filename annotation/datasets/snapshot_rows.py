"""The rows of a snapshot, a chunk of chains at a time (``chunk_rows``): each chain's
consensus with the options applied, or a machine source's labels where no person's
stand, the machine cells and routing mark beside them, the split by problem, and the
running content hash and counts (``SnapshotTally``). ``snapshots`` reads the chunks and
writes what this returns."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from annotation.datasets.snapshot_notes import chain_notes
from annotation.datasets.snapshot_options import SnapshotOptions
from annotation.first_error import first_error
from annotation.models import (
    AnnotationSource,
    Chain,
    ChainRouting,
    MachineLabel,
    Project,
    Snapshot,
    SnapshotChain,
    SnapshotSplit,
)
from annotation.quality.consensus import ChainConsensus, consensus_for_chains
from annotation.quality.consensus_fit import DawidSkeneFit
from annotation.routing.machine_labels import hard_label


def problem_split(*, problem_hash: str, seed: int, heldout_fraction: float) -> str:
    """The split of every chain of a problem: a hash of the problem's content hash and the
    seed, so it is deterministic, never splits one problem across train and held-out, and
    is the same in another project or database holding the same problem text (ids are
    not: a re-import elsewhere would otherwise reshuffle the held-out set).

    >>> problem_split(problem_hash="ab" * 32, seed=0, heldout_fraction=0.0)
    'train'
    >>> problem_split(problem_hash="ab" * 32, seed=0, heldout_fraction=1.0)
    'heldout'
    """
    digest = hashlib.sha256(f"{seed}:{problem_hash}".encode()).digest()
    position = int.from_bytes(digest[:8], "big") / 2**64
    return SnapshotSplit.HELDOUT if position < heldout_fraction else SnapshotSplit.TRAIN


def snapshot_row_digest(
    *,
    chain_hash: str,
    split: str,
    labels: list[int | None],
    tied: list[int] | None = None,
    machine: dict[str, Any] | None = None,
    notes: list[dict[str, Any]] | None = None,
) -> bytes:
    """The canonical bytes of one snapshot row in the content hash. Tie marks, machine
    labels and people's notes are hashed only where a row has some, so a snapshot without
    them hashes as before they existed."""
    row: list[Any] = [chain_hash, split, labels]
    if tied or machine or notes:
        row.append(tied or [])
    if machine or notes:
        row.append(machine or {})
    if notes:
        row.append(notes)
    return json.dumps(row, separators=(",", ":"), sort_keys=True).encode() + b"\n"


@dataclass(frozen=True, slots=True)
class SnapshotRow:
    """One chain's labels once the options are applied."""

    labels: list[int | None]
    support: list[float | None]
    tied: list[int]  # the steps marked tied (ties="mark")
    tied_steps: int  # steps whose votes tie, whatever became of them
    below_support: int  # steps left unlabeled by min_support


def _options_applied(*, result: ChainConsensus, options: SnapshotOptions) -> SnapshotRow:
    """``result``'s labels with ``min_support`` and ``ties`` applied. A lead's ruling
    settles the steps it rates: it is neither a tie nor short of votes."""
    ruling = next(
        (vote for vote in result.votes if vote.source == AnnotationSource.ADJUDICATION), None
    )
    counted = [vote for vote in result.votes if vote.source != AnnotationSource.ADJUDICATION]
    labels, support = list(result.labels), list(result.support)
    marks: list[int] = []
    tied_steps = below = 0
    for index, label in enumerate(result.labels):
        if label is None:
            continue
        if ruling is not None and index < len(ruling.labels) and ruling.labels[index] is not None:
            continue
        votes = sum(
            1 for vote in counted if index < len(vote.labels) and vote.labels[index] is not None
        )
        tie = index < len(result.tied) and result.tied[index]
        tied_steps += tie
        if votes < options.min_support:
            below += 1
            labels[index] = support[index] = None
        elif tie and options.ties == "drop":
            labels[index] = support[index] = None
        elif tie and options.ties == "mark":
            marks.append(index)
    return SnapshotRow(
        labels=labels, support=support, tied=marks, tied_steps=tied_steps, below_support=below
    )


@dataclass
class SnapshotTally:
    """The snapshot's content hash and counts, kept as its rows are written."""

    digest: Any = field(default_factory=hashlib.sha256)
    chains: int = 0
    steps_labeled: int = 0
    heldout: int = 0
    tied_steps: int = 0
    below_support: int = 0
    unfinished_left_out: int = 0
    imported_left_out: int = 0
    # Chains whose labels rest on a source's votes (a lead's ruling is a person's).
    sources: dict[str, int] = field(
        default_factory=lambda: {AnnotationSource.HUMAN.value: 0, AnnotationSource.IMPORT.value: 0}
    )
    problems: set[str] = field(default_factory=set)
    label_counts: dict[str, int] = field(default_factory=lambda: {"-1": 0, "0": 0, "1": 0})
    # With machine sources: chains whose labels rest on each, rows carrying each's labels.
    machine: dict[str, int] | None = None
    machine_rows: dict[str, int] | None = None
    # With machine sources: rows marked machine-agreed (routing).
    machine_agreed: int = 0

    def add(
        self,
        *,
        row: SnapshotRow,
        chain_hash: str,
        split: str,
        problem_hash: str,
        sources: set[str],
        machine: dict[str, Any] | None = None,
        notes: list[dict[str, Any]] | None = None,
    ) -> None:
        self.digest.update(
            snapshot_row_digest(
                chain_hash=chain_hash,
                split=split,
                labels=row.labels,
                tied=row.tied,
                machine=machine,
                notes=notes,
            )
        )
        if machine and self.machine is not None and self.machine_rows is not None:
            if machine.get("labels_from"):
                self.machine[machine["labels_from"]] += 1
            for source in machine.get("sources", {}):
                self.machine_rows[source] += 1
            self.machine_agreed += "routing" in machine
        self.chains += 1
        self.heldout += split == SnapshotSplit.HELDOUT
        self.problems.add(problem_hash)
        for source in sources:
            if source in self.sources:
                self.sources[source] += 1
        for label in row.labels:
            if label is not None:
                self.steps_labeled += 1
                self.label_counts[str(label)] += 1

    def counts(self) -> dict[str, Any]:
        return {
            "content_hash": self.digest.hexdigest(),
            "chains": self.chains,
            "steps_labeled": self.steps_labeled,
            "train_chains": self.chains - self.heldout,
            "heldout_chains": self.heldout,
            "problems": len(self.problems),
            "label_counts": self.label_counts,
            "tied_steps": self.tied_steps,
            "steps_below_support": self.below_support,
            "unfinished_left_out": self.unfinished_left_out,
            "sources": dict(self.sources),
            "imported_left_out": self.imported_left_out,
            **(
                {
                    "machine": dict(self.machine),
                    "machine_rows": dict(self.machine_rows or {}),
                    "machine_agreed": self.machine_agreed,
                }
                if self.machine is not None
                else {}
            ),
        }


def chunk_rows(
    *,
    snapshot: Snapshot,
    project: Project,
    options: SnapshotOptions,
    chunk: list[tuple[int, str, int, str]],
    tally: SnapshotTally,
    fit: DawidSkeneFit | None,
) -> list[SnapshotChain]:
    """The snapshot's rows for a chunk of (chain id, content hash, step count, problem
    hash), in that order, counted in ``tally``: the chains with a label left once the
    options are applied."""
    consensus = consensus_for_chains(
        chain_step_counts={chain_id: count for chain_id, _, count, _ in chunk},
        import_labels=options.import_rule(project=project),
        project=project,
        fit=fit,
    )
    machine = _machine_cells(
        chain_step_counts={chain_id: count for chain_id, _, count, _ in chunk}, options=options
    )
    agreed = _agreed_chains(chain_ids=list(machine))
    notes = chain_notes(votes={chain_id: result.votes for chain_id, result in consensus.items()})
    rows: list[SnapshotChain] = []
    for chain_id, chain_hash, _, problem_hash in chunk:
        result = consensus[chain_id]
        cells = machine.get(chain_id, {})
        labels_from = None
        if result.has_label:
            row = _options_applied(result=result, options=options)
            tally.tied_steps += row.tied_steps
            tally.below_support += row.below_support
        else:
            labels_from, machine_row = _machine_row(cells=cells, options=options)
            if machine_row is None:
                continue
            row = machine_row
        if all(label is None for label in row.labels):
            continue
        split = problem_split(
            problem_hash=problem_hash,
            seed=snapshot.seed,
            heldout_fraction=snapshot.heldout_fraction,
        )
        row_machine = _row_machine(
            cells=cells, labels_from=labels_from, labels=row.labels, agreed=agreed.get(chain_id)
        )
        tally.add(
            row=row,
            chain_hash=chain_hash,
            split=split,
            problem_hash=problem_hash,
            sources={
                AnnotationSource.IMPORT.value
                if vote.source == AnnotationSource.IMPORT
                else AnnotationSource.HUMAN.value
                for vote in result.votes
            }
            if labels_from is None
            else set(),
            machine=row_machine,
            notes=notes.get(chain_id),
        )
        rows.append(
            SnapshotChain(
                snapshot=snapshot,
                chain_id=chain_id,
                split=split,
                labels=row.labels,
                support=row.support,
                tied=row.tied,
                votes=[
                    {"by": vote.by, "source": vote.source, "labels": list(vote.labels)}
                    for vote in result.votes
                ],
                machine=row_machine,
                notes=notes.get(chain_id, []),
            )
        )
    return rows


def _row_machine(
    *,
    cells: dict[str, list[dict[str, Any] | None]],
    labels_from: str | None,
    labels: list[int | None],
    agreed: tuple[str, int] | None,
) -> dict[str, Any]:
    """A row's ``SnapshotChain.machine``: its machine sources' cells, the source its labels
    came from, and the routing mark where those labels are what the sources agreed on
    (``snapshot_options``); empty where no included source labeled the chain."""
    if not cells:
        return {}
    out: dict[str, Any] = {"labels_from": labels_from, "sources": cells}
    if labels_from is None or agreed is None:
        return out
    if first_error(labels, reading="settled") == agreed[1]:
        out.update(routing=agreed[0], agreed_first_error=agreed[1])
    return out


def _agreed_chains(*, chain_ids: list[int]) -> dict[int, tuple[str, int]]:
    """(routing, agreed first error) of these chains that routing accepted (agreed or
    spot_check): those whose machine labels a snapshot marks machine-agreed. One query;
    none without chains (a snapshot without machine sources reads no cells)."""
    if not chain_ids:
        return {}
    rows = Chain.objects.filter(
        pk__in=chain_ids, routing__in=[ChainRouting.AGREED, ChainRouting.SPOT_CHECK]
    ).values_list("pk", "routing", "routing_first_error")
    return {
        chain_id: (routing, first_error)
        for chain_id, routing, first_error in rows
        if first_error is not None  # routing gives an accepted chain its first error
    }


def _machine_row(
    *, cells: dict[str, list[dict[str, Any] | None]], options: SnapshotOptions
) -> tuple[str | None, SnapshotRow | None]:
    """(source, row) of a chain no person (nor a counted import) labeled: the first
    machine source, in the lead's order, that rated a step gives its labels; (None, None)
    when none did. No votes stand behind them, so min_support and ties do not apply."""
    labels_from = next(
        (
            source
            for source in options.machine_sources
            if any(cell and cell["rating"] is not None for cell in cells.get(source, []))
        ),
        None,
    )
    if labels_from is None:
        return None, None
    labels = [cell["rating"] if cell else None for cell in cells[labels_from]]
    return labels_from, SnapshotRow(
        labels=labels, support=[None] * len(labels), tied=[], tied_steps=0, below_support=0
    )


def _machine_cells(
    *, chain_step_counts: dict[int, int], options: SnapshotOptions
) -> dict[int, dict[str, list[dict[str, Any] | None]]]:
    """The machine labels of the snapshot's sources on these chains, the newest run's per
    step (as the pages show them), a cell or None per step: {chain: {source: cells}}.
    One query; none without machine sources."""
    if not options.machine_sources:
        return {}
    out: dict[int, dict[str, list[dict[str, Any] | None]]] = {}
    labels = (
        MachineLabel.objects.filter(
            chain_id__in=list(chain_step_counts), source__in=options.machine_sources
        )
        .order_by("chain_id", "source", "step__index", "-created_at", "-id")
        .values_list(
            "chain_id",
            "source",
            "step__index",
            "rating",
            "value",
            "confidence",
            "detail",
            "model",
            "config_hash",
            "run_kind",
            "run_id",
        )
    )
    for chain_id, source, index, rating, value, confidence, detail, *run in labels:
        model, config_hash, run_kind, run_id = run
        cells = out.setdefault(chain_id, {}).setdefault(
            source, [None] * chain_step_counts[chain_id]
        )
        if index >= len(cells) or cells[index] is not None:
            continue  # an older run's label of the same step
        cells[index] = {
            "rating": rating,
            "value": value,
            "hard": hard_label(rating=rating, value=value, detail=detail),
            "confidence": confidence,
            "model": model,
            "config_hash": config_hash,
            "run": f"{run_kind}:{run_id}",
        }
    # In the lead's order, so a row's JSON reads as the options do.
    return {
        chain_id: {
            source: by_source[source] for source in options.machine_sources if source in by_source
        }
        for chain_id, by_source in out.items()
    }
