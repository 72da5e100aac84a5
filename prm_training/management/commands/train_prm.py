"""`manage.py train_prm PROJECT [--wait] [--mode ...] [--epochs N] ...`: start a training run."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.access import project_resolve
from annotation.models import Project
from annotation.work_limits import TooManyWaiting
from prm_training.management.commands._wait import wait_for_run
from prm_training.ml.config import AMBIGUOUS_RULES, MODES
from prm_training.models import ModelVersion, RunStatus, TrainingRun
from prm_training.services.training import training_run_start

# Command-line option -> PRMConfig field.
CONFIG_OPTIONS = (
    "backbone",
    "mode",
    "epochs",
    "head_epochs",
    "learning_rate",
    "batch_size",
    "max_length",
    "ambiguous",
    "ensemble_size",
    "seed",
)


class Command(BaseCommand):
    help = (
        "Start a PRM training run on a fresh snapshot of the project's consensus labels. "
        "The run goes to the GPU workers; --wait follows it to the end."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("project", help="the project's id or name")
        parser.add_argument("--wait", action="store_true", help="wait for the run to finish")
        parser.add_argument("--timeout", type=float, default=None, help="seconds to wait at most")
        parser.add_argument("--user", help="username recorded as the run's starter")
        parser.add_argument(
            "--backbone",
            help="a backbone by name: a model directory under STEPLAB_BACKBONE_DIR, "
            "version:<id> of this project, or blank for the bundled MiniLM",
        )
        parser.add_argument("--mode", choices=MODES)
        parser.add_argument("--epochs", type=int, help="passes in full mode")
        parser.add_argument("--head-epochs", type=int, help="passes in frozen_head mode")
        parser.add_argument("--learning-rate", type=float)
        parser.add_argument("--batch-size", type=int)
        parser.add_argument("--max-length", type=int)
        parser.add_argument("--ambiguous", choices=AMBIGUOUS_RULES)
        parser.add_argument("--ensemble-size", type=int)
        parser.add_argument("--seed", type=int)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            project = project_resolve(ref=options["project"])
        except Project.DoesNotExist as exc:
            raise CommandError(str(exc)) from None
        user = None
        if options["user"]:
            user = get_user_model().objects.filter(username=options["user"]).first()
            if user is None:
                raise CommandError(f"No user {options['user']!r}.")
        config = {name: options[name] for name in CONFIG_OPTIONS if options[name] is not None}
        try:
            run = training_run_start(project=project, user=user, settings=config)
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None
        except TooManyWaiting as exc:
            raise CommandError(exc.detail) from None
        if not options["wait"]:
            self.stdout.write(f'queued training run {run.pk} for "{project.name}"')
            return
        run = wait_for_run(
            model=TrainingRun, pk=run.pk, fraction=lambda r: r.progress, timeout=options["timeout"]
        )
        if run.status != RunStatus.SUCCEEDED:
            raise CommandError(f"training run {run.pk} {run.status}: {run.error or 'no detail'}")
        version = ModelVersion.objects.get(training_run=run)
        metrics = ", ".join(
            f"{name} {version.metrics[name]:.4f}"
            for name in ("processbench_f1", "step_auroc")
            if name in version.metrics
        )
        self.stdout.write(
            f'training run {run.pk} succeeded: "{project.name}" v{version.version} '
            f"({'active' if version.is_active else 'not active'}; {metrics})"
        )
