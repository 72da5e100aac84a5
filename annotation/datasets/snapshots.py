"""Snapshots: freezing the consensus labels of a project into an immutable, hashed
dataset version, split into train and held-out by problem.

What a snapshot holds is the lead's choice of options (``snapshot_options`` says what
each does); its rows are built a chunk at a time by ``snapshot_rows``.

A snapshot is written once, here, and never updated: there is no update service, and
exports and training read it only through ``annotation.datasets.snapshot_reads``. Asking for
a snapshot when nothing changed still makes a new version (numbers are cheap, and a
version then also records who froze the data and when); its ``content_hash`` equals the
previous one's, which is how a lead or a training run tells that nothing changed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Exists, Max, OuterRef, Q

from annotation.datasets.snapshot_options import (
    AMBIGUOUS_CHOICES,
    DEFAULT_AMBIGUOUS,
    DEFAULT_TIES,
    TIE_RULES,
    SnapshotOptions,
    options_checked,
)
from annotation.datasets.snapshot_rows import SnapshotTally, chunk_rows
from annotation.models import (
    Annotation,
    AnnotationSource,
    Chain,
    ConsensusMethod,
    MachineLabel,
    Project,
    Snapshot,
    SnapshotChain,
    SnapshotKind,
)
from annotation.quality.consensus_fit import dawid_skene_fit
from annotation.webhooks.events import webhook_snapshot_created

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# How ``finished_only`` reads in a snapshot's meta (``_finished`` is the rule itself).
FINISHED_RULE = "human passes reached the overlap, a lead ruled, or a gold chain"
FINISHED_RULE_IMPORTED = (
    f"{FINISHED_RULE}, or labels an import carried in on a chain no person has started"
)
FLAGGED_RULE = "; flagged chains left out"
# Chains read, voted on and written per round; keeps memory flat for any project size.
CHUNK_CHAINS = 2_000
# pg_advisory_xact_lock key space of snapshots: (namespace << 32) | project id.
_SNAPSHOT_LOCK_NAMESPACE = 0x534E50


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
    evaluation_run: int | None = None,
) -> Snapshot:
    """Freeze the consensus of every chain (finished, with ``finished_only``) that has at
    least one labeled step once ``min_support`` and ``ties`` are applied (see
    ``snapshot_options``).

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
    ``training_run`` when a training run took it for itself (``evaluation_run`` when an
    evaluation run did, to measure versions on an evaluation set's newer labels). With
    ``machine_sources``, ``counts`` also holds machine {source: chains whose labels rest on it},
    machine_rows {source: rows carrying its labels} and machine_agreed (rows marked
    machine-agreed by routing).

    Raises ValidationError for a held-out fraction outside [0, 1), a seed outside what
    its column holds (0 .. 2**31 - 1: a larger one would not be stored as given, and the
    stored seed would not reproduce the split), an unknown ``ambiguous`` or ``ties``, a
    ``min_support`` outside 1 .. MIN_SUPPORT_MAX, an unknown or repeated machine source,
    or nothing to freeze (no labeled step left once the options are applied). Snapshots
    of one project are serialised by an advisory lock, so versions are gapless and never
    collide; each kind numbers its own (a training or evaluation run's snapshot is of kind
    training, so the lead's datasets read v1, v2, v3 with no gaps left by the loop);
    labeling goes on meanwhile (the snapshot sees what was committed when each chunk was
    read)."""
    if ambiguous not in AMBIGUOUS_CHOICES:
        raise ValidationError({"ambiguous": f"Must be one of {', '.join(AMBIGUOUS_CHOICES)}."})
    options = options_checked(
        finished_only=finished_only,
        include_imported=include_imported,
        min_support=min_support,
        ties=ties,
        heldout_fraction=heldout_fraction,
        seed=seed,
        machine_sources=tuple(machine_sources),
    )
    runs = {"training_run": training_run, "evaluation_run": evaluation_run}
    with transaction.atomic():
        _snapshots_lock(project=project)
        snapshot = _snapshot_started(
            project=project,
            user=user,
            options=options,
            ambiguous=ambiguous,
            runs=runs,
            heldout_fraction=heldout_fraction,
            seed=seed,
        )
        counts = _write_rows(snapshot=snapshot, project=project, options=options)
        if counts["chains"] == 0:
            raise ValidationError(_nothing_to_freeze(counts=counts, options=options))
        snapshot.content_hash = counts.pop("content_hash")
        snapshot.counts = counts
        snapshot.save(update_fields=["content_hash", "counts"])
        webhook_snapshot_created(snapshot=snapshot)
    return snapshot


def _snapshot_started(
    *,
    project: Project,
    user: User | None,
    options: SnapshotOptions,
    ambiguous: str,
    runs: dict[str, int | None],
    heldout_fraction: float,
    seed: int,
) -> Snapshot:
    """The snapshot's row before its rows are written (under ``_snapshots_lock``). The
    loop's own snapshots (a training or an evaluation run's) number apart from the lead's
    datasets."""
    own = any(run is not None for run in runs.values())
    kind = SnapshotKind.TRAINING if own else SnapshotKind.DATASET
    return Snapshot.objects.create(
        project=project,
        kind=kind,
        version=_next_version(project=project, kind=kind),
        content_hash="",
        created_by=user,
        heldout_fraction=heldout_fraction,
        seed=seed,
        meta=_snapshot_meta(project=project, options=options, ambiguous=ambiguous, runs=runs),
    )


def _snapshot_meta(
    *, project: Project, options: SnapshotOptions, ambiguous: str, runs: dict[str, int | None]
) -> dict[str, Any]:
    """What a snapshot says of itself: the options it was taken with (an export says
    them from here), the rules in force, and the training or evaluation run that took
    it, if one did (``runs``: {"training_run": id or None, "evaluation_run": ...})."""
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
        # A training or evaluation run's own snapshot, listed apart from the lead's datasets.
        **{key: run for key, run in runs.items() if run is not None},
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


def _write_rows(
    *, snapshot: Snapshot, project: Project, options: SnapshotOptions
) -> dict[str, Any]:
    """Write the snapshot's rows chunk by chunk; its content hash and counts."""
    tally = SnapshotTally()
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
            chunk_rows(
                snapshot=snapshot,
                project=project,
                options=options,
                chunk=chunk,
                tally=tally,
                fit=fit,
            )
        )
