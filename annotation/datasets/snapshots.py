"""Snapshots: freezing the consensus labels of a project into an immutable, hashed
dataset version, split into train and held-out by problem.

What a snapshot holds is the lead's choice, recorded in ``meta["options"]``:

- ``include_imported``: which label sources it reads (``meta["sources"]``). Off (the
  default) only people's: annotators' passes and leads' rulings; labels that came with an
  import (``import:processbench``) are no vote and finish no chain. On, imported labels
  count too, by the project's ``import_labels`` rule (a project that ignores them uses
  them on chains no person labeled, as "fallback" does). ``counts["sources"]`` says how
  many chains rest on each source, and ``imported_left_out`` how many chains only an
  import labeled, which a people-only snapshot leaves out.
- ``machine_sources``: the machine sources (``MachineSource``: monte_carlo, judge, prm,
  import) whose labels the snapshot takes, none by default. Each row then carries those
  sources' labels beside its consensus (``SnapshotChain.machine``: the newest run's per
  step, with value, hard label, model and run), which exports read for provenance,
  Monte-Carlo soft labels and Math-Shepherd's hard labels. A chain no person (and no
  counted import) labeled takes its labels from the first of these sources, in the
  lead's order, that rated it; it then counts as finished like an import's chain. Machine
  labels are never votes: they change no consensus of a chain people labeled.
  ``counts["machine"]`` says how many chains' labels rest on each source and
  ``counts["machine_rows"]`` how many rows carry each source's labels; both only in a
  snapshot that includes a source.
- Machine agreement (routing, ``routing.services``): a row whose labels come from a
  machine source (as above) on a chain routing accepted (``Chain.routing`` agreed, or
  spot_check while no person has labeled it yet) is marked machine-agreed:
  ``SnapshotChain.machine["routing"]`` holds the routing and ``["agreed_first_error"]``
  the first error the sources agreed on, and every export marks the record
  (``exporters.formats``). Only where the row's labels put their first error there
  (``routing_verdict``): labels from a source that was not among the agreeing ones, or
  that changed since the routing pass, are not what was agreed and carry no mark. A row
  people labeled is never marked (a spot check a person labeled carries their labels).
  ``counts["machine_agreed"]`` says how many rows are marked, in a snapshot that
  includes a machine source. An agreed chain that no included source labeled stays out.
- ``finished_only`` (the default): only finished chains, those whose human passes reached
  the project's overlap (``Chain.is_finished``), that a lead ruled on, gold chains, and,
  with ``include_imported``, chains labeled by an import that no person has started on;
  flagged chains are left out. Off, every chain with a labeled step counts, as in a
  training run's own snapshot (the loop learns from every label as soon as it is given).
- ``min_support``: a step's label needs at least this many votes; below it the step is
  left unlabeled. A lead's ruling settles a step whatever the count.
- ``ties``: a step whose votes tie (no ruling) is left unlabeled (``drop``, the default:
  a tie is not a consensus), keeps the lowest rating (``lowest``, the consensus rule's own
  pick), or keeps the lowest and is listed in the row's ``tied`` (``mark``).
- ``heldout_fraction`` and ``seed``: the split by problem (``problem_split``).

A snapshot is written once, here, and never updated: there is no update service, and
exports and training read it only through ``annotation.datasets.snapshot_reads``. Asking for
a snapshot when nothing changed still makes a new version (numbers are cheap, and a
version then also records who froze the data and when); its ``content_hash`` equals the
previous one's, which is how a lead or a training run tells that nothing changed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Exists, Max, OuterRef, Q

from annotation.models import (
    Annotation,
    AnnotationSource,
    Chain,
    ChainRouting,
    ConsensusMethod,
    ImportLabels,
    MachineLabel,
    MachineSource,
    Project,
    Snapshot,
    SnapshotChain,
    SnapshotKind,
    SnapshotSplit,
)
from annotation.quality.consensus import (
    ChainConsensus,
    DawidSkeneFit,
    consensus_for_chains,
    dawid_skene_fit,
)
from annotation.routing.machine_labels import hard_label
from annotation.routing.services import routing_verdict
from annotation.webhooks.events import webhook_snapshot_created

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# How a TRL export maps an ambiguous (0) step: to a positive or a negative label, or by
# dropping the chain from that step on.
AMBIGUOUS_CHOICES = ("positive", "negative", "drop")
DEFAULT_AMBIGUOUS = "drop"
# What a snapshot does with a step whose votes tie (see the module docstring).
TIE_POLICIES = ("drop", "lowest", "mark")
DEFAULT_TIES = "drop"
TIE_RULES = {
    "drop": "tied steps are left unlabeled",
    "lowest": "lowest rating",
    "mark": "lowest rating, the step listed in the row's tied",
}
# A step label's least number of votes; no project asks for more annotators (overlap).
MIN_SUPPORT_MAX = 50
FINISHED_RULE = "human passes reached the overlap, a lead ruled, or a gold chain"
FINISHED_RULE_IMPORTED = (
    f"{FINISHED_RULE}, or labels an import carried in on a chain no person has started"
)
FLAGGED_RULE = "; flagged chains left out"
# Chains read, voted on and written per round; keeps memory flat for any project size.
CHUNK_CHAINS = 2_000
# pg_advisory_xact_lock key space of snapshots: (namespace << 32) | project id.
_SNAPSHOT_LOCK_NAMESPACE = 0x534E50


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


SEED_MAX = 2**31 - 1  # Snapshot.seed is an integer column


@dataclass(frozen=True, slots=True)
class SnapshotOptions:
    """What a snapshot holds (the module docstring says what each option does)."""

    finished_only: bool = True
    include_imported: bool = False
    min_support: int = 1
    ties: str = DEFAULT_TIES
    heldout_fraction: float = 0.2
    seed: int = 0
    # MachineSource values, in the lead's order of preference.
    machine_sources: tuple[str, ...] = ()

    @property
    def sources(self) -> list[str]:
        """The label sources the snapshot reads (AnnotationSource values, a lead's ruling
        being a person's, then ``machine:<source>`` per machine source)."""
        return [
            AnnotationSource.HUMAN,
            *([AnnotationSource.IMPORT] * self.include_imported),
            *(f"machine:{source}" for source in self.machine_sources),
        ]

    def import_rule(self, *, project: Project) -> str:
        """How imported labels enter consensus: not at all unless included, then by the
        project's rule, "fallback" where the project ignores them."""
        if not self.include_imported:
            return ImportLabels.IGNORE
        if project.import_labels == ImportLabels.IGNORE:
            return ImportLabels.FALLBACK
        return project.import_labels

    def as_meta(self) -> dict[str, Any]:
        return {
            "finished_only": self.finished_only,
            "include_imported": self.include_imported,
            "min_support": self.min_support,
            "ties": self.ties,
            "heldout_fraction": self.heldout_fraction,
            "seed": self.seed,
            "machine_sources": list(self.machine_sources),
        }


def snapshot_row_digest(
    *,
    chain_hash: str,
    split: str,
    labels: list[int | None],
    tied: list[int] | None = None,
    machine: dict[str, Any] | None = None,
) -> bytes:
    """The canonical bytes of one snapshot row in the content hash. Tie marks and machine
    labels are hashed only where a row has some, so a snapshot without them hashes as
    before they existed."""
    row: list[Any] = [chain_hash, split, labels]
    if tied or machine:
        row.append(tied or [])
    if machine:
        row.append(machine)
    return json.dumps(row, separators=(",", ":"), sort_keys=True).encode() + b"\n"


def snapshot_create(
    *,
    project: Project,
    user: User | None = None,
    heldout_fraction: float = 0.2,
    seed: int = 0,
    ambiguous: str = DEFAULT_AMBIGUOUS,
    finished_only: bool = True,
    include_imported: bool = False,
    min_support: int = 1,
    ties: str = DEFAULT_TIES,
    machine_sources: tuple[str, ...] | list[str] = (),
    training_run: int | None = None,
) -> Snapshot:
    """Freeze the consensus of every chain (finished, with ``finished_only``) that has at
    least one labeled step once ``min_support`` and ``ties`` are applied (see the module
    docstring).

    ``content_hash`` is sha256 over the rows (chain content hash, split, labels) in chain
    content-hash order, so it depends on what was labeled and how it was split, not on
    ids, timing or who voted. ``counts`` holds chains, steps_labeled, train_chains,
    heldout_chains, problems, label_counts {"-1", "0", "1"}, tied_steps (steps whose votes
    tie, whatever became of them), steps_below_support (left unlabeled by
    ``min_support``), unfinished_left_out (labeled chains ``finished_only`` left out),
    sources {"human", "import"} (chains whose labels rest on votes of that source; a chain
    may count under both) and imported_left_out (chains only an import labeled, which a
    snapshot without ``include_imported`` leaves out); ``meta`` the label sources read
    (``sources``), the options (``options``), the consensus rules in force,
    ``trl_ambiguous``, the default mapping of ambiguous steps for TRL exports, and
    ``training_run`` when a training run took it for itself. With ``machine_sources``,
    ``counts`` also holds machine {source: chains whose labels rest on it},
    machine_rows {source: rows carrying its labels} and machine_agreed (rows marked
    machine-agreed by routing).

    Raises ValidationError for a held-out fraction outside [0, 1), a seed outside what
    its column holds (0 .. 2**31 - 1: a larger one would not be stored as given, and the
    stored seed would not reproduce the split), an unknown ``ambiguous`` or ``ties``, a
    ``min_support`` outside 1 .. MIN_SUPPORT_MAX, an unknown or repeated machine source,
    or nothing to freeze (no labeled step
    left once the options are applied). Snapshots of one project are
    serialised by an advisory lock, so versions are gapless and never collide; each kind
    numbers its own (a training run's snapshot, ``training_run``, is of kind training, so
    the lead's datasets read v1, v2, v3 with no gaps left by training runs); labeling
    goes on meanwhile (the snapshot sees what was committed when each chunk was read)."""
    if ambiguous not in AMBIGUOUS_CHOICES:
        raise ValidationError({"ambiguous": f"Must be one of {', '.join(AMBIGUOUS_CHOICES)}."})
    options = _options_checked(
        finished_only=finished_only,
        include_imported=include_imported,
        min_support=min_support,
        ties=ties,
        heldout_fraction=heldout_fraction,
        seed=seed,
        machine_sources=tuple(machine_sources),
    )
    with transaction.atomic():
        _snapshots_lock(project=project)
        kind = SnapshotKind.DATASET if training_run is None else SnapshotKind.TRAINING
        snapshot = Snapshot.objects.create(
            project=project,
            kind=kind,
            version=_next_version(project=project, kind=kind),
            content_hash="",
            created_by=user,
            heldout_fraction=heldout_fraction,
            seed=seed,
            meta=_snapshot_meta(
                project=project, options=options, ambiguous=ambiguous, training_run=training_run
            ),
        )
        counts = _write_rows(snapshot=snapshot, project=project, options=options)
        if counts["chains"] == 0:
            raise ValidationError(_nothing_to_freeze(counts=counts, options=options))
        snapshot.content_hash = counts.pop("content_hash")
        snapshot.counts = counts
        snapshot.save(update_fields=["content_hash", "counts"])
        webhook_snapshot_created(snapshot=snapshot)
    return snapshot


def _options_checked(
    *,
    finished_only: bool,
    include_imported: bool,
    min_support: int,
    ties: str,
    heldout_fraction: float,
    seed: int,
    machine_sources: tuple[str, ...] = (),
) -> SnapshotOptions:
    """The options, or ValidationError naming the first one out of its range."""
    unknown = [source for source in machine_sources if source not in MachineSource.values]
    if unknown or len(set(machine_sources)) != len(machine_sources):
        raise ValidationError(
            {
                "machine_sources": "Each at most once, of "
                f"{', '.join(MachineSource.values)}"
                + (f"; unknown: {', '.join(map(str, unknown))}." if unknown else ".")
            }
        )
    if not 0 <= heldout_fraction < 1:
        raise ValidationError({"heldout_fraction": "Must be at least 0 and below 1."})
    if not 0 <= seed <= SEED_MAX:
        raise ValidationError({"seed": f"Must be between 0 and {SEED_MAX}."})
    if ties not in TIE_POLICIES:
        raise ValidationError({"ties": f"Must be one of {', '.join(TIE_POLICIES)}."})
    if not 1 <= min_support <= MIN_SUPPORT_MAX:
        raise ValidationError({"min_support": f"Must be between 1 and {MIN_SUPPORT_MAX}."})
    return SnapshotOptions(
        finished_only=finished_only,
        include_imported=include_imported,
        min_support=min_support,
        ties=ties,
        heldout_fraction=heldout_fraction,
        seed=seed,
        machine_sources=machine_sources,
    )


def _snapshot_meta(
    *, project: Project, options: SnapshotOptions, ambiguous: str, training_run: int | None
) -> dict[str, Any]:
    """What a snapshot says of itself: the options it was taken with (an export says
    them from here), the rules in force, and the training run that took it, if one did."""
    finished = FINISHED_RULE_IMPORTED if options.include_imported else FINISHED_RULE
    if options.machine_sources:
        finished += ", or machine labels of an included source on a chain no person has started"
    return {
        "options": options.as_meta(),
        "sources": options.sources,
        **({"finished": finished + FLAGGED_RULE} if options.finished_only else {}),
        "consensus": {
            # majority or dawid_skene (Project.consensus): how the votes became labels.
            "method": project.consensus,
            "order": ["adjudication", project.consensus, "import_fallback"],
            "adjudication": "the newest ruling wins on the steps it rates",
            "tie": TIE_RULES[options.ties],
            "import_labels": options.import_rule(project=project),
        },
        "split": "sha256(seed:problem content hash) < heldout_fraction",
        "trl_ambiguous": ambiguous,
        # A training run's own snapshot, listed apart from the lead's datasets.
        **({"training_run": training_run} if training_run is not None else {}),
    }


def _next_version(*, project: Project, kind: str) -> int:
    """The next number of ``kind`` (each kind numbers its own, from its highest): called
    under ``_snapshots_lock``, so two snapshots never take one number."""
    latest = Snapshot.objects.filter(project=project, kind=kind).aggregate(latest=Max("version"))
    return (latest["latest"] or 0) + 1


def _snapshots_lock(*, project: Project) -> None:
    """Serialise snapshot creation per project (the version number is max + 1). An
    advisory lock rather than FOR UPDATE on the project row, which would stall every
    lease taken meanwhile (see ``imports._imports_lock``)."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s)",
            [(_SNAPSHOT_LOCK_NAMESPACE << 32) | (project.pk & 0xFFFFFFFF)],
        )


def snapshots_hold_off(*, project: Project) -> None:
    """Wait for a snapshot of ``project`` being taken, and keep new ones from starting,
    until the caller's transaction ends: the shared side of ``_snapshots_lock``. A
    revision of a pass (``labeling.revisions``) takes it, so it either commits before a
    snapshot reads anything or sees that snapshot and is refused."""
    if connection.vendor != "postgresql":
        return  # SQLite's BEGIN IMMEDIATE already serialises every writer
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock_shared(%s)",
            [(_SNAPSHOT_LOCK_NAMESPACE << 32) | (project.pk & 0xFFFFFFFF)],
        )


def _imported() -> Exists:
    return Exists(Annotation.objects.filter(chain=OuterRef("pk"), source=AnnotationSource.IMPORT))


def _finished(*, options: SnapshotOptions) -> Q:
    """The chains ``finished_only`` keeps: their labeling is done (see FINISHED_RULE).

    People finish a chain; an import's labels do not, unless the snapshot includes them:
    then labels an import carried in (a PRM800K or ProcessBench file) are a finished
    labeling of their own as long as no person has started on the chain. From a person's
    first pass on, the chain waits for the overlap like any other (its consensus then
    rests on the people's passes, or on them and the import's)."""
    of_chain = Annotation.objects.filter(chain=OuterRef("pk"))
    ruled = of_chain.filter(source=AnnotationSource.ADJUDICATION, superseded_by__isnull=True)
    done = Q(is_finished=True) | Q(is_gold=True) | Q(Exists(ruled))
    unstarted = ~Q(Exists(of_chain.filter(source=AnnotationSource.HUMAN)))
    if options.include_imported:
        done |= Q(_imported()) & unstarted
    if options.machine_sources:
        done |= Q(_machine_labeled(options=options)) & unstarted
    return done & Q(is_flagged=False)


def _machine_labeled(*, options: SnapshotOptions) -> Exists:
    """The chain has a label of one of the snapshot's machine sources."""
    return Exists(
        MachineLabel.objects.filter(chain=OuterRef("pk"), source__in=options.machine_sources)
    )


@dataclass(frozen=True, slots=True)
class _Row:
    """One chain's labels once the options are applied."""

    labels: list[int | None]
    support: list[float | None]
    tied: list[int]  # the steps marked tied (ties="mark")
    tied_steps: int  # steps whose votes tie, whatever became of them
    below_support: int  # steps left unlabeled by min_support


def _options_applied(*, result: ChainConsensus, options: SnapshotOptions) -> _Row:
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
    return _Row(
        labels=labels, support=support, tied=marks, tied_steps=tied_steps, below_support=below
    )


def _nothing_to_freeze(*, counts: dict[str, Any], options: SnapshotOptions) -> str:
    """Why a snapshot came out empty, in the words of the option that emptied it."""
    if counts["steps_below_support"] or (counts["tied_steps"] and options.ties == "drop"):
        return (
            "No step label is left once the minimum support and the tie policy are "
            "applied: lower min_support or keep tied steps."
        )
    if counts["unfinished_left_out"]:
        return (
            f"No finished chain has a label yet ({counts['unfinished_left_out']} labeled "
            "chains are unfinished): take the snapshot without finished_only to include them."
        )
    if counts["imported_left_out"] and not options.include_imported:
        return (
            f"No chain has a label from a person yet ({counts['imported_left_out']} chains "
            "have labels from an import only): take the snapshot with include_imported to "
            "use them."
        )
    return "The project has no labeled step yet: nothing to snapshot."


@dataclass
class _Tally:
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
        row: _Row,
        chain_hash: str,
        split: str,
        problem_hash: str,
        sources: set[str],
        machine: dict[str, Any] | None = None,
    ) -> None:
        self.digest.update(
            snapshot_row_digest(
                chain_hash=chain_hash,
                split=split,
                labels=row.labels,
                tied=row.tied,
                machine=machine,
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


def _chunk_rows(
    *,
    snapshot: Snapshot,
    project: Project,
    options: SnapshotOptions,
    chunk: list[tuple[int, str, int, str]],
    tally: _Tally,
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
    (module docstring); empty where no included source labeled the chain."""
    if not cells:
        return {}
    out: dict[str, Any] = {"labels_from": labels_from, "sources": cells}
    if labels_from is not None and agreed is not None and routing_verdict(labels) == agreed[1]:
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
) -> tuple[str | None, _Row | None]:
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
    return labels_from, _Row(
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


def _write_rows(
    *, snapshot: Snapshot, project: Project, options: SnapshotOptions
) -> dict[str, Any]:
    """Write the snapshot's rows chunk by chunk; its content hash and counts."""
    tally = _Tally()
    if options.machine_sources:
        tally.machine = dict.fromkeys(options.machine_sources, 0)
        tally.machine_rows = dict.fromkeys(options.machine_sources, 0)
    # One Dawid-Skene fit for the whole snapshot: votes arriving meanwhile would
    # otherwise refit the project for a later chunk, and chunks would mix fits.
    fit = (
        dawid_skene_fit(project=project, import_labels=options.import_rule(project=project))
        if project.consensus == ConsensusMethod.DAWID_SKENE
        else None
    )
    annotated = Annotation.objects.filter(chain=OuterRef("pk"))
    candidates = Chain.objects.filter(project=project)
    # A chain a machine source of the snapshot labeled is a candidate whoever else did.
    machine = Q(_machine_labeled(options=options)) if options.machine_sources else Q(pk__in=[])
    if options.include_imported:
        candidates = candidates.filter(Q(Exists(annotated)) | machine)
    else:
        by_people = Exists(annotated.exclude(source=AnnotationSource.IMPORT))
        tally.imported_left_out = candidates.filter(_imported(), ~Q(by_people), ~machine).count()
        candidates = candidates.filter(Q(by_people) | machine)
    if options.finished_only:
        finished = _finished(options=options)
        tally.unfinished_left_out = candidates.filter(~finished).count()
        candidates = candidates.filter(finished)
    last_hash = ""
    while True:
        # Keyset pagination in content-hash order (the chain_unique_content index): the
        # hash is computed as the rows stream by, in its canonical order.
        chunk = list(
            candidates.filter(content_hash__gt=last_hash)
            .order_by("content_hash")
            .values_list("id", "content_hash", "step_count", "problem__content_hash")[:CHUNK_CHAINS]
        )
        if not chunk:
            return tally.counts()
        last_hash = chunk[-1][1]
        SnapshotChain.objects.bulk_create(
            _chunk_rows(
                snapshot=snapshot,
                project=project,
                options=options,
                chunk=chunk,
                tally=tally,
                fit=fit,
            )
        )
