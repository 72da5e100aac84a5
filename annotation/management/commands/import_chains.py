"""`manage.py import_chains PROJECT FILE [--format ...]`: import a file of chains."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from annotation.access import project_resolve
from annotation.datasets.importers.formats import FORMATS
from annotation.datasets.imports import ImportRejected, chain_import
from annotation.models import Project

# Bad lines listed on the terminal; the count says how many more there were.
MAX_LISTED_ERRORS = 50


class Command(BaseCommand):
    help = (
        "Import reasoning chains (and any step labels they carry) from a file into a project. "
        "The file is imported whole or not at all; a file imported before adds nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("project", help="the project's id or name")
        parser.add_argument("file", type=Path, help="the file to import")
        parser.add_argument(
            "--format",
            default="auto",
            choices=("auto", *FORMATS),
            help="the file's format; auto (the default) detects it",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["file"]
        try:
            project = project_resolve(ref=options["project"])
        except Project.DoesNotExist as exc:
            raise CommandError(str(exc)) from None
        if not path.is_file():
            raise CommandError(f"{path}: no such file.")

        # The total is unknown until the file is read; tqdm then shows a count and a rate.
        # The bar is for a person at a terminal: it goes to the process's stderr (Django's
        # OutputWrapper would end every redraw with a newline) and turns itself off when
        # that is not a terminal, so logs and pipes get the summary line only. The size
        # comes from shutil, which falls back to 80x24 where a terminal reports 0x0 (tqdm
        # would then draw nothing at all).
        columns, lines = shutil.get_terminal_size()
        bar = tqdm(
            unit=" chains",
            unit_scale=True,
            file=sys.stderr,
            disable=None,
            leave=False,
            ncols=columns,
            nrows=lines,
        )
        with bar:
            try:
                result = chain_import(
                    project=project, path=path, fmt=options["format"], progress=bar.update
                )
            except ImportRejected as exc:
                raise CommandError(_rejection_message(path=path, rejected=exc)) from None
            except OSError as exc:
                reason = exc.strerror or str(exc)
                raise CommandError(f"{path}: cannot read the file ({reason}).") from None
            except ValueError as exc:  # FormatDetectionError and unknown formats
                raise CommandError(f"{path}: {exc}") from None

        if result.already_imported:
            self.stdout.write(
                f"already imported: {result.filename} as {result.format} into "
                f'"{project.name}" (import {result.batch_id}); nothing added'
            )
            return
        if result.format == "problems":
            self.stdout.write(
                f"imported {_count(result.problems_created, 'problem')} from "
                f'{result.filename} into "{project.name}"; '
                f"{_count(result.problems_duplicate, 'duplicate')}"
            )
            return
        self.stdout.write(
            f"imported {_count(result.chains_created, 'chain')} "
            f"({_count(result.steps_created, 'step')}, {_count(result.labels_created, 'label')}) "
            f'from {result.filename} as {result.format} into "{project.name}"; '
            f"{_count(result.chains_duplicate, 'duplicate')}"
        )


def _count(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def _rejection_message(*, path: Path, rejected: ImportRejected) -> str:
    lines = [
        f"{path.name} was not imported ({_count(rejected.error_count, 'bad line')} as "
        f"{rejected.format}; nothing was written):"
    ]
    listed = rejected.errors[:MAX_LISTED_ERRORS]
    lines += [f"  {error.where}: {error.reason}" for error in listed]
    if rejected.error_count > MAX_LISTED_ERRORS:
        lines.append(f"  ... and {rejected.error_count - MAX_LISTED_ERRORS:,} more")
    return "\n".join(lines)
