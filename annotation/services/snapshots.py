"""Snapshots: freezing the consensus labels of a project into an immutable, hashed
dataset version, split into train and held-out by problem.

A snapshot is written once, here, and never updated: there is no update service, and
exports and training read it only through ``annotation.selectors.datasets``. Asking for
a snapshot when nothing changed still makes a new version (numbers are cheap, and a
version then also records who froze the data and when); its ``content_hash`` equals the
previous one's, which is how a lead or a training run tells that nothing changed.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Exists, Max, OuterRef

from annotation.models import (
    Annotation,
    Chain,
    Project,
    Snapshot,
    SnapshotChain,
    SnapshotSplit,
)
from annotation.services.consensus import consensus_for_chains

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# How a TRL export maps an ambiguous (0) step: to a positive or a negative label, or by
# dropping the chain from that step on.
AMBIGUOUS_CHOICES = ("positive", "negative", "drop")
DEFAULT_AMBIGUOUS = "drop"
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


def snapshot_row_digest(*, chain_hash: str, split: str, labels: list[int | None]) -> bytes:
    """The canonical bytes of one snapshot row in the content hash."""
    return json.dumps([chain_hash, split, labels], separators=(",", ":")).encode() + b"\n"


def snapshot_create(
    *,
    project: Project,
    user: User | None = None,
    heldout_fraction: float = 0.2,
    seed: int = 0,
    ambiguous: str = DEFAULT_AMBIGUOUS,
    training_run: int | None = None,
) -> Snapshot:
    """Freeze the consensus of every chain with at least one labeled step.

    ``content_hash`` is sha256 over the rows (chain content hash, split, labels) in chain
    content-hash order, so it depends on what was labeled and how it was split, not on
    ids, timing or who voted. ``counts`` holds chains, steps_labeled, train_chains,
    heldout_chains, problems and label_counts {"-1", "0", "1"}; ``meta`` the consensus
    rules in force, ``trl_ambiguous``, the default mapping of ambiguous steps for TRL
    exports, and ``training_run`` when a training run took it for itself.

    Raises ValidationError for a held-out fraction outside [0, 1), a seed outside what
    its column holds (0 .. 2**31 - 1: a larger one would not be stored as given, and the
    stored seed would not reproduce the split), an unknown ``ambiguous`` or a project
    with no labeled step. Snapshots of one project are
    serialised by an advisory lock, so versions are gapless and never collide; labeling
    goes on meanwhile (the snapshot sees what was committed when each chunk was read)."""
    if not 0 <= heldout_fraction < 1:
        raise ValidationError({"heldout_fraction": "Must be at least 0 and below 1."})
    if not 0 <= seed <= SEED_MAX:
        raise ValidationError({"seed": f"Must be between 0 and {SEED_MAX}."})
    if ambiguous not in AMBIGUOUS_CHOICES:
        raise ValidationError({"ambiguous": f"Must be one of {', '.join(AMBIGUOUS_CHOICES)}."})
    with transaction.atomic():
        _snapshots_lock(project=project)
        latest = Snapshot.objects.filter(project=project).aggregate(latest=Max("version"))
        snapshot = Snapshot.objects.create(
            project=project,
            version=(latest["latest"] or 0) + 1,
            content_hash="",
            created_by=user,
            heldout_fraction=heldout_fraction,
            seed=seed,
            meta={
                "consensus": {
                    "order": ["adjudication", "majority", "import_fallback"],
                    "adjudication": "the newest ruling wins on the steps it rates",
                    "tie": "lowest rating",
                    "import_labels": project.import_labels,
                },
                "split": "sha256(seed:problem content hash) < heldout_fraction",
                "trl_ambiguous": ambiguous,
                # A training run's own snapshot, listed apart from the lead's datasets.
                **({"training_run": training_run} if training_run is not None else {}),
            },
        )
        counts = _write_rows(snapshot=snapshot, project=project)
        if counts["chains"] == 0:
            raise ValidationError("The project has no labeled step yet: nothing to snapshot.")
        snapshot.content_hash = counts.pop("content_hash")
        snapshot.counts = counts
        snapshot.save(update_fields=["content_hash", "counts"])
    return snapshot


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


def _write_rows(*, snapshot: Snapshot, project: Project) -> dict[str, Any]:
    digest = hashlib.sha256()
    label_counts = {"-1": 0, "0": 0, "1": 0}
    chains = steps_labeled = heldout = 0
    problems: set[str] = set()
    annotated = Annotation.objects.filter(chain=OuterRef("pk"))
    last_hash = ""
    while True:
        # Keyset pagination in content-hash order (the chain_unique_content index): the
        # hash is computed as the rows stream by, in its canonical order.
        chunk = list(
            Chain.objects.filter(project=project, content_hash__gt=last_hash)
            .filter(Exists(annotated))
            .order_by("content_hash")
            .values_list("id", "content_hash", "step_count", "problem__content_hash")[:CHUNK_CHAINS]
        )
        if not chunk:
            break
        last_hash = chunk[-1][1]
        consensus = consensus_for_chains(
            chain_step_counts={chain_id: count for chain_id, _, count, _ in chunk},
            import_labels=project.import_labels,
        )
        rows: list[SnapshotChain] = []
        for chain_id, chain_hash, _, problem_hash in chunk:
            result = consensus[chain_id]
            if not result.has_label:
                continue
            split = problem_split(
                problem_hash=problem_hash,
                seed=snapshot.seed,
                heldout_fraction=snapshot.heldout_fraction,
            )
            digest.update(
                snapshot_row_digest(chain_hash=chain_hash, split=split, labels=result.labels)
            )
            rows.append(
                SnapshotChain(
                    snapshot=snapshot,
                    chain_id=chain_id,
                    split=split,
                    labels=result.labels,
                    support=result.support,
                    votes=[
                        {"by": vote.by, "source": vote.source, "labels": list(vote.labels)}
                        for vote in result.votes
                    ],
                )
            )
            chains += 1
            heldout += split == SnapshotSplit.HELDOUT
            problems.add(problem_hash)
            for label in result.labels:
                if label is not None:
                    steps_labeled += 1
                    label_counts[str(label)] += 1
        SnapshotChain.objects.bulk_create(rows)
    return {
        "content_hash": digest.hexdigest(),
        "chains": chains,
        "steps_labeled": steps_labeled,
        "train_chains": chains - heldout,
        "heldout_chains": heldout,
        "problems": len(problems),
        "label_counts": label_counts,
    }
