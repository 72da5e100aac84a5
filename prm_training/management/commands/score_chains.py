"""`manage.py score_chains PROJECT [--wait]`: score unlabeled chains, refresh priorities."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.access import project_resolve
from annotation.models import Project
from annotation.work_limits import TooManyWaiting
from prm_training.management.commands._wait import wait_for_run
from prm_training.models import AcquisitionStrategy, RunStatus, ScoringRun
from prm_training.services.scoring import scoring_run_start


class Command(BaseCommand):
    help = (
        "Score the project's unlabeled chains with the active model version and turn the "
        "scores into queue priorities with the project's acquisition strategy."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("project", help="the project's id or name")
        parser.add_argument("--wait", action="store_true", help="wait for the run to finish")
        parser.add_argument("--timeout", type=float, default=None, help="seconds to wait at most")
        parser.add_argument("--strategy", choices=AcquisitionStrategy.values)
        parser.add_argument("--random-fraction", type=float)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            project = project_resolve(ref=options["project"])
        except Project.DoesNotExist as exc:
            raise CommandError(str(exc)) from None
        try:
            run = scoring_run_start(
                project=project,
                user=None,
                strategy=options["strategy"],
                random_fraction=options["random_fraction"],
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        except TooManyWaiting as exc:
            raise CommandError(exc.detail) from None
        if not options["wait"]:
            self.stdout.write(f'queued scoring run {run.pk} for "{project.name}"')
            return
        run = wait_for_run(
            model=ScoringRun,
            pk=run.pk,
            fraction=lambda r: r.chains_scored / r.chains_total if r.chains_total else 0.0,
            timeout=options["timeout"],
        )
        if run.status != RunStatus.SUCCEEDED:
            raise CommandError(f"scoring run {run.pk} {run.status}: {run.error or 'no detail'}")
        self.stdout.write(
            f'scoring run {run.pk} succeeded: {run.chains_scored} chains of "{project.name}" '
            f"scored, {run.priorities_updated} priorities set by {run.strategy}"
        )
