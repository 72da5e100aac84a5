"""`manage.py simulate_active_learning (FILE [FILE ...] | --project ID [--save]) --out DIR
[--strategy NAME[,NAME]] [--rounds N] [--batch K] [--seeds S] [--quick]`: replay labeled
chains as the oracle and compare acquisition strategies with random and the model-free
baselines, paired by seed.

The defaults (every strategy, 8 rounds of 40 chains after 20, 20 seeds) are sized for
ProcessBench's GSM8K and MATH files: with the correction for the seeds' overlapping
splits more seeds narrow the intervals little (``prm_training.ml.simulate.DEFAULT_SEEDS``);
``--quick`` is a small run for a smoke test, whose intervals resolve little.

With files it never touches the database. With ``--project`` it replays the labels of the
project's newest snapshot through the path a simulation run from the ML page takes
(``prm_training.services.simulation``), and ``--save`` stores the paired result on the
project's loop settings, where the 'auto' strategy reads it
(``prm_training.services.strategy``; too few labels are stored as such: 'auto' stays
random). The loop is ``prm_training.ml.simulate``; this command reads, checks input and
writes the outputs.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.datasets.importers import (
    FORMATS,
    LineError,
    ParsedProblem,
    detect_format,
    iter_chains,
)
from annotation.datasets.importers.formats import DETECT_HEAD_BYTES, FormatDetectionError
from prm_training.ml.simulate import DEFAULT_SEEDS
from prm_training.models import SimulationSize
from prm_training.services.simulation import SIZES

if TYPE_CHECKING:
    from prm_training.ml.config import PRMConfig
    from prm_training.ml.simulate import SimulationConfig

# How many rejected records a failed parse lists before "... and N more".
SHOWN_ERRORS = 5
# Run sizes: sized to resolve 0.02 F1 on ProcessBench, and a smoke test's (a simulation
# run's sizes, ``services.simulation.SIZES``).
FULL = SIZES[SimulationSize.FULL]
QUICK = SIZES[SimulationSize.QUICK]


def _read_chains(paths: list[Path], fmt: str) -> tuple[list[Any], dict[int, bool | None]]:
    """(ChainExamples of every file, chain_id -> final answer graded right/wrong/None).

    A final answer is graded against the chain's reference answer where both exist, else
    by the file's own verdict (ProcessBench's ``final_answer_correct``): the platform
    knows reference answers, so this is no label leak to ``convincing_wrong``."""
    from prm_training.ml.data import ChainExample
    from prm_training.ml.evaluation import subset_of
    from prm_training.ml.grading import answers_equivalent

    examples: list[ChainExample] = []
    graded: dict[int, bool | None] = {}
    errors: list[str] = []
    for path in paths:
        try:
            handle = open(path, "rb")  # noqa: SIM115 - closed below, after streaming
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None
        with handle:
            file_format = fmt
            if fmt == "auto":
                try:
                    file_format = detect_format(handle.read(DETECT_HEAD_BYTES))
                except FormatDetectionError as exc:
                    raise CommandError(f"{path}: {exc}") from None
                handle.seek(0)
            for item in iter_chains(handle, file_format):
                if isinstance(item, LineError):
                    errors.append(f"{path}:{item.line}: {item.reason}")
                    continue
                if isinstance(item, ParsedProblem):
                    errors.append(f"{path}:{item.line}: a problem without a chain to replay")
                    continue
                chain_id = len(examples) + 1
                if item.answer and item.reference_answer:
                    graded[chain_id] = answers_equivalent(item.answer, item.reference_answer)
                elif isinstance(item.meta.get("final_answer_correct"), bool):
                    graded[chain_id] = item.meta["final_answer_correct"]
                examples.append(
                    ChainExample(
                        chain_id=chain_id,
                        problem=item.problem,
                        steps=item.steps,
                        labels=item.labels,
                        answer=item.answer,
                        reference_answer=item.reference_answer,
                        answer_correct=graded.get(chain_id),
                        subset=subset_of(
                            stated=item.meta.get("subset"),
                            record_id=item.meta.get("id"),
                            source=path.name,
                        ),
                    )
                )
    if errors:
        more = len(errors) - SHOWN_ERRORS
        listed = "; ".join(errors[:SHOWN_ERRORS]) + (f"; ... and {more} more" if more > 0 else "")
        raise CommandError(f"{len(errors)} record(s) rejected: {listed}")
    return examples, graded


class Command(BaseCommand):
    help = (
        "Replay labeled chains as the oracle: from a random seed set, each round every "
        "strategy picks a batch, its labels are revealed, the PRM is retrained and scored "
        "on a held-out part split by problem (a different split per seed). Prints each "
        "strategy's paired difference with random at equal labeled steps and the "
        "baselines' (95% intervals corrected for the seeds' overlapping splits), F1 per "
        "subset, and which strategy, if any, saves labeled steps; writes DIR/results.csv, "
        "DIR/summary.txt and DIR/learning_curve.png. --project ID replays a project's "
        "newest snapshot; --save stores the result for the loop's 'auto' strategy."
    )
    # Files in, files out (or one project's snapshot): no system check needs more.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "files",
            nargs="*",
            type=Path,
            metavar="FILE",
            help="labeled files in any import format (several are joined)",
        )
        parser.add_argument(
            "--project",
            type=int,
            default=None,
            help="replay the labels of this project's newest snapshot instead of files",
        )
        parser.add_argument(
            "--save",
            action="store_true",
            help="with --project: store the result where the loop's 'auto' strategy reads it",
        )
        parser.add_argument(
            "--strategy",
            default=None,
            help="comma-separated strategies; 'random' (the reference) is always added "
            "(default: every strategy)",
        )
        _machine_arguments(parser)
        parser.add_argument("--rounds", type=int, default=None, help="default 8 (--quick 2)")
        parser.add_argument(
            "--batch", type=int, default=None, help="chains per round, default 40 (--quick 8)"
        )
        parser.add_argument("--out", type=Path, required=True, help="output directory")
        parser.add_argument(
            "--seeds",
            type=int,
            default=None,
            help=f"number of seeds (0..N-1), default {DEFAULT_SEEDS} (--quick 3)",
        )
        parser.add_argument(
            "--seed-size",
            type=int,
            default=None,
            help="randomly labeled chains before the first round, default 20 (--quick 8)",
        )
        parser.add_argument(
            "--quick",
            action="store_true",
            help="a small run (3 seeds, 2 rounds of 8, short head training) for smoke tests",
        )
        parser.add_argument("--heldout-fraction", type=float, default=0.2)
        parser.add_argument(
            "--random-fraction",
            type=float,
            default=0.2,
            help="share of each batch picked at random (the platform's mix)",
        )
        parser.add_argument("--format", default="auto", choices=("auto", *FORMATS))
        parser.add_argument("--mode", default="frozen_head", choices=("frozen_head", "full"))
        parser.add_argument(
            "--backbone", default=None, help="local model directory (default: the bundled MiniLM)"
        )
        parser.add_argument("--head-epochs", type=int, default=None)
        parser.add_argument(
            "--max-length",
            type=int,
            default=None,
            help="tokens per window (default 512; at most the backbone's positions)",
        )
        parser.add_argument("--epochs", type=int, default=None, help="full mode only")
        parser.add_argument(
            "--cache-dir",
            type=Path,
            default=None,
            help="feature cache (default: DIR/cache, reused by a rerun)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from prm_training.ml.simulation_plot import plot_learning_curves
        from prm_training.ml.simulation_report import summary_table, write_csv

        sim = _simulation_config(options)
        if bool(options["files"]) == (options["project"] is not None):
            raise CommandError("give labeled files or --project ID, not both or neither")
        if options["save"] and options["project"] is None:
            raise CommandError("--save stores a project's result: give --project ID")
        out: Path = options["out"]
        out.mkdir(parents=True, exist_ok=True)
        prm = _prm_config(options, out)
        started = time.monotonic()
        if options["project"] is not None:
            rows, chains = self._replay_project(options, sim, prm, out)
            if not rows:
                return
        else:
            rows, chains = self._replay_files(options, sim, prm, out)
        elapsed = time.monotonic() - started

        write_csv(rows, out / "results.csv")
        plot_learning_curves(rows, out / "learning_curve.png")
        table = summary_table(rows, heldout_fraction=sim.heldout_fraction)
        (out / "summary.txt").write_text(table + "\n")
        self.stdout.write(table)
        self.stdout.write(
            f"simulated {len(sim.strategies)} strategies"
            + (f" and {len(sim.machine_arms)} machine arms" if sim.machine_arms else "")
            + f" x {len(sim.seeds)} seeds x "
            f"{sim.rounds} rounds on {chains} labeled chains in {elapsed:.0f}s: "
            f"{out / 'results.csv'}, {out / 'summary.txt'}, {out / 'learning_curve.png'}"
        )

    def _replay_project(
        self, options: dict[str, Any], sim: SimulationConfig, prm: PRMConfig, out: Path
    ) -> tuple[list[Any], int]:
        """The project's path, shared with simulation runs; with --save its evidence is
        stored (too few labels as such, with no rows)."""
        from prm_training.services.simulation import (
            simulation_evidence_store,
            simulation_project_replay,
        )

        project_id = options["project"]
        with _trainings_bar(sim) as progress:
            try:
                replay = simulation_project_replay(
                    project_id=project_id,
                    sim=sim,
                    prm=prm,
                    work_dir=out,
                    too_few_stored=options["save"],
                    progress=progress,
                    warn=lambda text: self.stderr.write(f"warning: {text}"),
                )
            except ValidationError as exc:
                raise CommandError("; ".join(exc.messages)) from None
        if options["save"]:
            simulation_evidence_store(project_id=project_id, evidence=replay.evidence)
            self.stdout.write(
                f"saved for project {project_id}: {replay.evidence['chosen']}, "
                f"{replay.evidence['why']}"
            )
        return replay.rows, replay.chains

    def _replay_files(
        self, options: dict[str, Any], sim: SimulationConfig, prm: PRMConfig, out: Path
    ) -> tuple[list[Any], int]:
        from prm_training.ml.oracle import oracle_chains
        from prm_training.ml.simulate import simulate

        examples, graded = _read_chains(options["files"], options["format"])
        labeled = oracle_chains(examples)
        if not labeled:
            raise CommandError(
                f"no step labels in {', '.join(map(str, options['files']))}: the simulation "
                "replays labeled chains as the oracle"
            )
        if "convincing_wrong" in sim.strategies and not any(v is not None for v in graded.values()):
            self.stderr.write(
                "warning: no final answer can be graded (no reference answers); "
                "convincing_wrong ranks by step entropy only"
            )
        with _trainings_bar(sim) as progress:
            try:
                rows = simulate(
                    labeled, sim, prm, answers_correct=graded, work_dir=out, progress=progress
                )
            except ValueError as exc:
                raise CommandError(str(exc)) from None
        return rows, len(labeled)


def _machine_arguments(parser: CommandParser) -> None:
    """The machine arms' options (``ml.machine_labeler``)."""
    parser.add_argument(
        "--machine-arms",
        default="",
        help="comma-separated confidences at which an arm accepts a machine's labels "
        "and sends the rest to people, e.g. 0.9,0.97 (machine labels' worth, issue 23)",
    )
    parser.add_argument(
        "--machine-sources",
        default="prm",
        help="comma-separated machine sources of the arms: prm (the round's own PRM) "
        "and, with --project, sources of its stored labels (monte_carlo, judge, ...)",
    )


def _simulation_config(options: dict[str, Any]) -> SimulationConfig:
    """The simulation the options ask for (random always among the strategies; the quick
    or full sizes where an option is not given)."""
    from prm_training.ml.acquisition import STRATEGIES
    from prm_training.ml.machine_labeler import PRM_SOURCE, MachineArm
    from prm_training.ml.simulate import BASELINE, SimulationConfig

    chosen = options["strategy"] if options["strategy"] is not None else ",".join(STRATEGIES)
    named = [name.strip() for name in chosen.split(",") if name.strip()]
    sizes = QUICK if options["quick"] else FULL
    for name, value in sizes.items():
        if options[name] is None:
            options[name] = value
    if options["seeds"] < 1:
        raise CommandError("--seeds must be at least 1")
    if options["backbone"] is not None and not Path(options["backbone"]).is_dir():
        raise CommandError(f"--backbone {options['backbone']} is not a directory")
    try:
        sources = [name.strip() for name in options["machine_sources"].split(",") if name.strip()]
        if any(name != PRM_SOURCE for name in sources) and options["project"] is None:
            raise ValueError("--machine-sources other than prm are a project's: give --project")
        arms = tuple(
            MachineArm(source, _confidence(value))
            for source in sources
            for value in options["machine_arms"].split(",")
            if value.strip()
        )
        return SimulationConfig(
            machine_arms=arms,
            strategies=tuple(dict.fromkeys([BASELINE, *named])),
            rounds=options["rounds"],
            batch=options["batch"],
            seeds=tuple(range(options["seeds"])),
            seed_size=options["seed_size"],
            heldout_fraction=options["heldout_fraction"],
            random_fraction=options["random_fraction"],
        )
    except ValueError as exc:
        raise CommandError(str(exc)) from None


def _confidence(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--machine-arms: not a confidence: {text.strip()!r}") from None


def _prm_config(options: dict[str, Any], out: Path) -> PRMConfig:
    """The PRM each round trains: the default with the options' overrides, its feature
    cache under ``out`` unless given."""
    from prm_training.ml.config import PRMConfig

    overrides: dict[str, Any] = {
        "mode": options["mode"],
        "cache_dir": str(options["cache_dir"] or out / "cache"),
        "report_every_s": 60.0,
    }
    if options["backbone"] is not None:
        overrides["backbone"] = str(options["backbone"])
    for name in ("head_epochs", "epochs", "max_length"):
        if options[name] is not None:
            overrides[name] = options[name]
    try:
        return PRMConfig(**overrides)
    except ValueError as exc:
        raise CommandError(str(exc)) from None


@contextmanager
def _trainings_bar(sim: SimulationConfig) -> Iterator[Callable[[], None]]:
    """A progress bar of the simulation's trainings on stderr; yields its tick."""
    from tqdm import tqdm
    from transformers.utils import logging as transformers_logging

    from prm_training.services.simulation import simulation_trainings

    # transformers draws a bar per weight load (two a round); keep stderr to ours.
    transformers_logging.disable_progress_bar()
    with tqdm(
        total=simulation_trainings(sim), desc="trainings", unit="run", file=sys.stderr
    ) as bar:
        yield lambda: bar.update(1)
