"""`make demo`'s data: demo users, two projects and chains Steplab generates itself, and a
third project of problems with known answers and no chains yet, for the machine-label
loop on the language model `make install` puts under the backbone root: the ML page
samples chains for them, rolls out from their steps and has the model judge them, and the
workspace shows the Monte-Carlo verdicts for annotators to confirm or override.

Idempotent: users, projects and memberships are looked up before they are created, and
the chains go through the import service, whose file hash makes a second import of the
same (deterministic) file a no-op. A demo user's changed password is left alone."""

from __future__ import annotations

import io
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from annotation.demo_data import generate_chains, write_jsonl
from annotation.models import LabelingMode, MachineSource, Project, Role
from annotation.projects.services import membership_add, project_create


@dataclass(frozen=True)
class DemoUser:
    username: str
    password: str
    is_staff: bool = False
    is_superuser: bool = False
    role: str | None = None  # role in the demo projects; None: not a member


DEMO_USERS = (
    DemoUser("annotator", "annotator-demo", role=Role.ANNOTATOR),
    DemoUser("lead", "lead-demo", is_staff=True, role=Role.LEAD),
    DemoUser("ml", "ml-demo", role=Role.ML),
    DemoUser("admin", "admin-demo", is_staff=True, is_superuser=True),
)


@dataclass(frozen=True)
class DemoProject:
    name: str
    labeling_mode: str
    overlap: int
    chains: int
    seed: int
    error_rate: float
    guidelines: str


GUIDELINES = """Grade every step on its own merits.

+1 (correct): the step is right and moves toward the answer.
0 (ambiguous): the step is unclear, or right but useless.
-1 (incorrect): the arithmetic or the reasoning is wrong.

A step that correctly continues from an earlier mistake is still graded on its own:
the computation it shows is right, so it can be +1 even when the final answer is wrong."""

FIRST_ERROR_GUIDELINES = """Read the steps in order and stop at the first incorrect one.

Mark every step before it +1 (or 0 if ambiguous) and the first wrong step -1; the rest are
not graded. If there is no mistake, grade every step."""

DEMO_PROJECTS = (
    DemoProject(
        name="Demo: arithmetic word problems",
        labeling_mode=LabelingMode.ALL_STEPS,
        overlap=2,
        chains=200,
        seed=2024,
        error_rate=0.3,
        guidelines=GUIDELINES,
    ),
    DemoProject(
        name="Demo: first error",
        labeling_mode=LabelingMode.FIRST_ERROR,
        overlap=1,
        chains=40,
        seed=4048,
        error_rate=0.5,
        guidelines=FIRST_ERROR_GUIDELINES,
    ),
)


MACHINE_PROJECT = "Demo: machine labels"
MACHINE_GUIDELINES = """The chains of this project were written by a language model.

Each step shows the machine's verdict (MC: Monte-Carlo rollouts from that step). Press v to
accept them all, change the steps you disagree with (1, 2, 3), then submit. Grade a step on
its own merits: a right computation is +1 even when the final answer is wrong."""
# GSM8K-style problems with their answers, for sampling runs.
MACHINE_PROBLEMS = (
    ("Tom has 3 apples and buys 4 more. How many apples does he have now?", "7"),
    ("A box holds 6 eggs. How many eggs are in 3 boxes?", "18"),
    ("Mia reads 12 pages a day. How many pages does she read in a week?", "84"),
    ("A shirt costs 15 dollars and a hat costs 8 dollars. What do 2 shirts and a hat cost?", "38"),
    ("There are 24 students split evenly into 4 teams. How many students are on each team?", "6"),
    ("Sam had 50 stickers, gave away 18 and then got 7 more. How many does he have now?", "39"),
)


class Command(BaseCommand):
    help = (
        "Create the demo users and projects and fill the projects with generated arithmetic "
        "chains. Safe to run again: nothing is added twice."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--allow-without-debug",
            action="store_true",
            help="Seed even though DEBUG is off. The demo passwords are public: never on a "
            "server others can reach.",
        )
        parser.add_argument("--host", default="127.0.0.1:8000", help="For the printed URL.")
        parser.add_argument(
            "--banner",
            default=None,
            help="Also write the URL and the logins to this file (`make demo` prints it "
            "once its server and workers are up: config.demo).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.DEBUG and not options["allow_without_debug"]:
            raise CommandError(
                "seed_demo creates users with published passwords; it runs only with "
                "DEBUG on (the dev settings), or with --allow-without-debug."
            )
        from annotation.datasets.imports import chain_import

        users = {spec.username: _user_ensure(spec) for spec in DEMO_USERS}
        lead = users["lead"]
        created_chains = 0
        for spec in DEMO_PROJECTS:
            with transaction.atomic():
                project = Project.objects.filter(name=spec.name).first()
                if project is None:
                    project = project_create(
                        name=spec.name,
                        created_by=lead,
                        overlap=spec.overlap,
                        labeling_mode=spec.labeling_mode,
                        guidelines=spec.guidelines,
                    )
                for user_spec in DEMO_USERS:
                    if user_spec.role is not None:
                        membership_add(
                            project=project, user=users[user_spec.username], role=user_spec.role
                        )
            chains = generate_chains(count=spec.chains, seed=spec.seed, error_rate=spec.error_rate)
            with tempfile.TemporaryDirectory(prefix="steplab-demo-") as tmp:
                path = Path(tmp) / f"demo-seed-{spec.seed}.jsonl"
                write_jsonl(chains, path)
                result = chain_import(
                    project=project, path=path, filename=path.name, fmt="generic", user=lead
                )
            created_chains += result.chains_created
            self.stdout.write(
                f"{project.name} (id {project.pk}): {project.chains.count()} chains"
                + (" (already imported)" if result.already_imported else "")
            )

        machine = _machine_project_ensure(users)
        self.stdout.write(
            f"{machine.name} (id {machine.pk}): {machine.problems.count()} problems, no chains "
            "yet (sample them on its Models page)"
        )
        self.stdout.write(
            self.style.SUCCESS(
                f"Demo ready: {len(DEMO_PROJECTS) + 1} projects, {created_chains} chains added."
            )
        )
        lines = [f"URL: http://{options['host']}/"]
        for login in DEMO_USERS:
            what = "superuser" if login.is_superuser else (login.role or "")
            lines.append(f"login: {login.username} / {login.password} ({what})")
        for line in lines:
            self.stdout.write(line)
        if options["banner"]:
            banner = Path(options["banner"])
            banner.parent.mkdir(parents=True, exist_ok=True)
            banner.write_text("Steplab is running.\n" + "\n".join(lines) + "\n")


def _machine_project_ensure(users: dict[str, User]) -> Project:
    """The machine-label project: its problems (a problems file, deduplicated by the
    import), pre-labels from the Monte-Carlo source shown to every chain, and routing on
    Monte-Carlo and the judge."""
    from annotation.datasets.imports import chain_import

    with transaction.atomic():
        project = Project.objects.filter(name=MACHINE_PROJECT).first()
        if project is None:
            project = project_create(
                name=MACHINE_PROJECT,
                created_by=users["lead"],
                labeling_mode=LabelingMode.FIRST_ERROR,
                guidelines=MACHINE_GUIDELINES,
                prelabels=True,
                prelabel_source=MachineSource.MONTE_CARLO,
                prelabel_holdout=0.0,
            )
            Project.objects.filter(pk=project.pk).update(
                routing_sources=[MachineSource.MONTE_CARLO, MachineSource.JUDGE]
            )
        for spec in DEMO_USERS:
            if spec.role is not None:
                membership_add(project=project, user=users[spec.username], role=spec.role)
    lines = "".join(json.dumps({"problem": p, "answer": a}) + "\n" for p, a in MACHINE_PROBLEMS)
    chain_import(
        project=project,
        path=io.BytesIO(lines.encode()),
        filename="demo-problems.jsonl",
        fmt="problems",
        user=users["lead"],
    )
    return project


def _user_ensure(spec: DemoUser) -> User:
    """The demo user, created with its demo password when missing. An existing user keeps
    its password; its flags are put back to the demo's."""
    user_model = get_user_model()
    user, created = user_model.objects.get_or_create(username=spec.username)
    changed = created
    for flag in ("is_staff", "is_superuser"):
        if getattr(user, flag) != getattr(spec, flag):
            setattr(user, flag, getattr(spec, flag))
            changed = True
    if created:
        user.set_password(spec.password)
    if changed:
        user.save()
    return user
