"""`manage.py export_dataset PROJECT --format ... --out PATH`: write a snapshot's labels."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.access import project_resolve
from annotation.api.fields import INT32_MAX, int_between
from annotation.datasets.exporters.formats import (
    EXPORT_DESCRIPTIONS,
    EXPORT_FORMATS,
    SOFT_LABEL_SOURCES,
)
from annotation.datasets.exports import export_write
from annotation.datasets.snapshot_options import (
    AMBIGUOUS_CHOICES,
    DEFAULT_TIES,
    MIN_SUPPORT_MAX,
    TIE_POLICIES,
)
from annotation.datasets.snapshot_reads import SNAPSHOT_KINDS, snapshot_get
from annotation.datasets.snapshots import snapshot_create
from annotation.models import MachineSource, Project, Snapshot, SnapshotSplit


class Command(BaseCommand):
    help = (
        "Export a dataset snapshot's consensus labels. Without --snapshot a new snapshot "
        "of the current labels is made first (with --ambiguous as its TRL default)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("project", help="the project's id or name")
        parser.add_argument(
            "--format",
            required=True,
            choices=EXPORT_FORMATS,
            help="; ".join(f"{fmt}: {EXPORT_DESCRIPTIONS[fmt]}" for fmt in EXPORT_FORMATS),
        )
        parser.add_argument("--out", required=True, type=Path, help="the file to write")
        parser.add_argument(
            "--snapshot",
            type=int_between(1, INT32_MAX),
            help="the snapshot version to export (default: a new one)",
        )
        parser.add_argument(
            "--kind", choices=SNAPSHOT_KINDS, default="dataset", help="what --snapshot numbers"
        )
        parser.add_argument(
            "--ambiguous",
            choices=AMBIGUOUS_CHOICES,
            help="how trl, parquet, processbench, openrlhf and qwen_prm treat an ambiguous "
            "(0) step or vote "
            "(default: the snapshot's own choice, drop for a new snapshot)",
        )
        parser.add_argument("--split", choices=SnapshotSplit.values, help="one split only")
        parser.add_argument(
            "--heldout-fraction", type=float, default=0.2, help="for a new snapshot"
        )
        parser.add_argument(
            "--seed", type=int_between(0, INT32_MAX), default=0, help="for a new snapshot"
        )
        parser.add_argument(
            "--include-unfinished",
            action="store_true",
            help="for a new snapshot: also chains still waiting for passes (default: "
            "finished chains only)",
        )
        parser.add_argument(
            "--include-imported",
            action="store_true",
            help="for a new snapshot: also the labels that came with an import (default: "
            "people's labels only)",
        )
        parser.add_argument(
            "--min-support",
            type=int_between(1, MIN_SUPPORT_MAX),
            default=1,
            help="for a new snapshot: the least votes a step label needs (default 1)",
        )
        parser.add_argument(
            "--ties",
            choices=TIE_POLICIES,
            default=DEFAULT_TIES,
            help="for a new snapshot: a step whose votes tie is dropped, kept at the lowest "
            f"rating, or kept and marked (default {DEFAULT_TIES})",
        )

        parser.add_argument(
            "--provenance",
            action="store_true",
            help="each record (csv row) also carries its steps' provenance: the label's "
            "source and what each machine source in the snapshot said (not for parquet)",
        )
        parser.add_argument(
            "--soft-labels",
            choices=SOFT_LABEL_SOURCES,
            default="votes",
            help="openrlhf: soft labels from the votes (default) or the Monte-Carlo values "
            "of a snapshot that includes them",
        )
        parser.add_argument(
            "--machine-source",
            action="append",
            choices=MachineSource.values,
            default=[],
            dest="machine_sources",
            help="for a new snapshot: take this machine source's labels too (repeat for "
            "several, in order of preference; default none)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            project = project_resolve(ref=options["project"])
        except Project.DoesNotExist as exc:
            raise CommandError(str(exc)) from None
        out: Path = options["out"]
        if not out.parent.is_dir():
            raise CommandError(f"{out.parent}: no such directory.")
        try:
            if options["snapshot"] is None:
                snapshot = snapshot_create(
                    project=project,
                    heldout_fraction=options["heldout_fraction"],
                    seed=options["seed"],
                    ambiguous=options["ambiguous"] or "drop",
                    finished_only=not options["include_unfinished"],
                    include_imported=options["include_imported"],
                    min_support=options["min_support"],
                    ties=options["ties"],
                    machine_sources=options["machine_sources"],
                )
                made = "new snapshot"
            else:
                found = snapshot_get(
                    project=project, version=options["snapshot"], kind=options["kind"]
                )
                if found is None:
                    wanted = Snapshot(kind=options["kind"], version=options["snapshot"])
                    raise CommandError(f'"{project.name}" has no snapshot {wanted.label}.')
                snapshot, made = found, "snapshot"
            result = export_write(
                snapshot=snapshot,
                fmt=options["format"],
                path=out,
                ambiguous=options["ambiguous"],
                split=options["split"],
                provenance=options["provenance"],
                soft_labels=options["soft_labels"],
            )
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from None
        except OSError as exc:
            raise CommandError(f"{out}: cannot write ({exc.strerror or exc}).") from None
        noun = "step rows" if result.format == "csv" else "chains"
        self.stdout.write(
            f"exported {result.records:,} {noun} ({result.steps:,} labeled steps) "
            f'of "{project.name}" {made} {snapshot.label} '
            f"({snapshot.content_hash[:12]}) as {result.format} to {out}; "
            f"ambiguous={result.ambiguous}" + (f", split={result.split}" if result.split else "")
        )
