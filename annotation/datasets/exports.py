"""Exports: a snapshot's consensus labels as a file, through the writers in
``annotation.datasets.exporters`` (``exporters.formats`` says what each format holds).

Every export streams: it reads the snapshot through ``snapshot_examples_streamed`` (one
``COPY (query) TO STDOUT`` on PostgreSQL, which the server computes while we write;
keyset pages elsewhere), in chain order, and the writers write as it reads, so memory
does not grow with the project. The one write path behind the `export_dataset` command
and the export endpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from django.core.exceptions import ValidationError
from django.utils.text import slugify

from annotation.datasets.exporters.formats import (
    EXPORT_FORMATS,
    EXTENSIONS,
    MONTE_CARLO_FORMATS,
    PREFIX_LABELS,
    SOFT_LABEL_SOURCES,
)
from annotation.datasets.exporters.records import MONTE_CARLO, json_record_builder, shepherd_steps
from annotation.datasets.exporters.streams import (
    ExportStats,
    csv_pieces,
    json_lines_pieces,
    parquet_write,
)
from annotation.datasets.snapshot_options import AMBIGUOUS_CHOICES, DEFAULT_AMBIGUOUS
from annotation.datasets.snapshot_reads import snapshot_examples_streamed, snapshot_options
from annotation.models import Project, Snapshot, SnapshotSplit


@dataclass(frozen=True)
class ExportResult:
    snapshot: Snapshot
    format: str
    ambiguous: str
    split: str | None
    records: int
    steps: int
    path: Path | None = None
    provenance: bool = False
    soft_labels: str = "votes"


# The longest project slug a file name carries: names run to 200 characters.
FILENAME_SLUG_MAX = 60


def export_filename(*, project: Project, snapshot: Snapshot, fmt: str, split: str | None) -> str:
    """The export's file name, ``<project-slug>-v<N>-<split>.<format>.<ext>``: the split
    is ``all`` for the whole snapshot, and ``.<format>`` is left out where it is the
    extension (csv, parquet); a training run's own snapshot, numbered apart, is
    ``-t<N>-`` (``Snapshot.label``), so its files never take a dataset's name. The slug
    is ASCII (a name with none falls back to ``project<id>``), so the name needs no
    quoting in a Content-Disposition header.

    >>> from annotation.models import Project, Snapshot
    >>> project = Project(pk=3, name="Algebra PRM, round 3")
    >>> export_filename(project=project, snapshot=Snapshot(version=2), fmt="trl", split=None)
    'algebra-prm-round-3-v2-all.trl.jsonl'
    >>> export_filename(project=Project(pk=4, name="Ωμέγα"), snapshot=Snapshot(version=1),
    ...                 fmt="csv", split="heldout")
    'project4-v1-heldout.csv'
    >>> export_filename(project=project, snapshot=Snapshot(kind="training", version=2),
    ...                 fmt="trl", split="train")
    'algebra-prm-round-3-t2-train.trl.jsonl'
    """
    slug = slugify(project.name)[:FILENAME_SLUG_MAX].strip("-") or f"project{project.pk}"
    extension = EXTENSIONS[fmt]
    kind = "" if fmt == extension else f".{fmt}"
    return f"{slug}-{snapshot.label}-{split or 'all'}{kind}.{extension}"


def export_options_check(
    *,
    fmt: str,
    ambiguous: str | None,
    split: str | None,
    snapshot: Snapshot,
    provenance: bool = False,
    soft_labels: str = "votes",
) -> str:
    """Validate the options; the ambiguous mapping to use (the snapshot's own default,
    ``meta["trl_ambiguous"]``, unless overridden). Raises ValidationError, also for
    Monte-Carlo soft labels outside ``openrlhf``, provenance in ``parquet``, and a format
    or option that reads Monte-Carlo labels from a snapshot that does not include them."""
    errors: dict[str, str] = {}
    if fmt not in EXPORT_FORMATS:
        errors["format"] = f"Must be one of {', '.join(EXPORT_FORMATS)}."
    if ambiguous is not None and ambiguous not in AMBIGUOUS_CHOICES:
        errors["ambiguous"] = f"Must be one of {', '.join(AMBIGUOUS_CHOICES)}."
    if split is not None and split not in SnapshotSplit.values:
        errors["split"] = f"Must be one of {', '.join(SnapshotSplit.values)}."
    if soft_labels not in SOFT_LABEL_SOURCES:
        errors["soft_labels"] = f"Must be one of {', '.join(SOFT_LABEL_SOURCES)}."
    elif soft_labels != "votes" and fmt != "openrlhf":
        errors["soft_labels"] = "Soft labels are written by the openrlhf format only."
    if provenance and fmt == "parquet":
        errors["provenance"] = "Parquet holds TRL's columns only: export another format."
    reads_monte_carlo = fmt in MONTE_CARLO_FORMATS or soft_labels == MONTE_CARLO
    included = snapshot_options(snapshot=snapshot).get("machine_sources") or []
    if reads_monte_carlo and not errors and MONTE_CARLO not in included:
        field = "format" if fmt in MONTE_CARLO_FORMATS else "soft_labels"
        errors[field] = (
            f"Snapshot {snapshot.label} does not include Monte-Carlo labels: take a "
            "snapshot with the monte_carlo machine source."
        )
    if errors:
        raise ValidationError(errors)
    return ambiguous or snapshot.meta.get("trl_ambiguous", DEFAULT_AMBIGUOUS)


def marks_machine_agreed(*, snapshot: Snapshot) -> bool:
    """Whether the snapshot's exports carry ``machine_agreed``: where it includes a
    machine source, the only way a row's labels can be machine labels routing accepted
    (``exporters.formats``). Other exports stay as they were, byte for byte."""
    return bool(snapshot_options(snapshot=snapshot).get("machine_sources"))


def export_bytes(
    *,
    snapshot: Snapshot,
    fmt: str,
    ambiguous: str,
    split: str | None = None,
    stats: ExportStats | None = None,
    provenance: bool = False,
    soft_labels: str = "votes",
) -> Iterator[bytes]:
    """A text format's export as UTF-8 pieces, for a file or an HTTP response. ``stats``
    (when given) is filled in as the pieces are produced. Options must have passed
    ``export_options_check``."""
    stats = stats if stats is not None else ExportStats()
    # csv writes every vote; openrlhf's soft labels are the votes' shares; provenance
    # names the votes' sources. The machine labels only where something reads them.
    examples = snapshot_examples_streamed(
        snapshot=snapshot,
        split=split,
        with_votes=provenance or fmt in ("csv", "openrlhf"),
        with_machine=provenance or fmt in MONTE_CARLO_FORMATS or soft_labels == MONTE_CARLO,
    )
    marked = marks_machine_agreed(snapshot=snapshot)
    if fmt == "csv":
        return csv_pieces(
            examples,
            version=snapshot.version,
            stats=stats,
            provenance=provenance,
            machine_agreed=marked,
        )
    record_of = json_record_builder(
        fmt=fmt,
        ambiguous=ambiguous,
        project_id=snapshot.project_id,
        soft_labels_from=soft_labels,
        provenance=provenance,
        machine_agreed=marked,
    )
    return json_lines_pieces(
        examples,
        record_of=record_of,
        stats=stats,
        labels_key=PREFIX_LABELS.get(fmt),
        steps_of=shepherd_steps if fmt == "math_shepherd" else None,
    )


def parquet_metadata(*, snapshot: Snapshot, ambiguous: str, split: str | None) -> dict[str, str]:
    return {
        "steplab": json.dumps(
            {
                "project": snapshot.project_id,
                "snapshot_version": snapshot.version,
                "snapshot_kind": snapshot.kind,
                "snapshot_hash": snapshot.content_hash,
                "ambiguous": ambiguous,
                "split": split,
            }
        )
    }


def export_parquet(
    *, snapshot: Snapshot, path: Path | BinaryIO, ambiguous: str, split: str | None = None
) -> ExportStats:
    """Write the snapshot's TRL rows to a Parquet file (a path or a binary file object)."""
    return parquet_write(
        snapshot_examples_streamed(snapshot=snapshot, split=split),
        path=path,
        ambiguous=ambiguous,
        metadata=parquet_metadata(snapshot=snapshot, ambiguous=ambiguous, split=split),
        machine_agreed=marks_machine_agreed(snapshot=snapshot),
    )


def export_write(
    *,
    snapshot: Snapshot,
    fmt: str,
    path: Path,
    ambiguous: str | None = None,
    split: str | None = None,
    provenance: bool = False,
    soft_labels: str = "votes",
) -> ExportResult:
    """Write the export of ``snapshot`` to ``path``. Raises ValidationError for bad
    options and OSError when the file cannot be written."""
    mapping = export_options_check(
        fmt=fmt,
        ambiguous=ambiguous,
        split=split,
        snapshot=snapshot,
        provenance=provenance,
        soft_labels=soft_labels,
    )
    if fmt == "parquet":
        stats = export_parquet(snapshot=snapshot, path=path, ambiguous=mapping, split=split)
    else:
        stats = ExportStats()
        with path.open("wb", buffering=1024 * 1024) as out:
            for piece in export_bytes(
                snapshot=snapshot,
                fmt=fmt,
                ambiguous=mapping,
                split=split,
                stats=stats,
                provenance=provenance,
                soft_labels=soft_labels,
            ):
                out.write(piece)
    return ExportResult(
        snapshot=snapshot,
        format=fmt,
        ambiguous=mapping,
        split=split,
        records=stats.records,
        steps=stats.steps,
        path=path,
        provenance=provenance,
        soft_labels=soft_labels,
    )
