"""Consensus: the one label per step that training uses, with the share of votes behind it.

Rule order for a step (the first that applies wins):

1. the chain's current adjudication by a lead, on the steps it rates, with support 1.0
   (only the newest adjudication counts: a later one supersedes the earlier, and the
   steps it leaves unrated fall through to the rules below);
2. majority vote over the chain's *current* human annotations: one vote per annotator,
   from their latest revision (an annotation that a newer one supersedes does not count);
   with ``Project.import_labels == "vote"`` each current import annotation is one more vote;
3. with ``import_labels == "fallback"`` (the default), on a chain that no person has
   labeled at all, the vote over its import annotations;
4. otherwise, and on every step nobody rated (e.g. after the first error in first_error
   mode), no label: None.

Tie rule: the lowest of the tied ratings wins (-1 before 0 before +1). A tie means the
annotators could not agree that the step is sound, and teaching a reward model that a
disputed step is correct is the costlier mistake: a PRM that rewards a flawed step steers
search toward it, while one that doubts a sound step only costs a little recall. The
support of a tie is then 1/2 (or 1/3), which lets training down-weight it.

``support`` is the share of the step's votes that went to the winning rating.

With ``Project.consensus == "dawid_skene"`` rule 2 (and 3) take each step's label from a
Dawid-Skene model fitted over all the project's counted votes (``dawid_skene_fit``):
each voter's reliability is learned from the labels, and from the gold chains' answer
keys, and a step's label is the most probable one, with its posterior probability as its
support. A posterior tie is a tie, as in majority vote (the lowest of the tied ratings,
flagged ``tied``). Adjudications still win.

The pure part (``step_consensus``, ``chain_consensus``) takes plain lists so it is tested
without a database; ``consensus_for_chains`` loads the votes of many chains in one query.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
from django.db import connection, transaction
from django.db.models import Count, Exists, Max, OuterRef, Sum
from django.utils import timezone

from annotation.models import (
    Annotation,
    AnnotationSource,
    Chain,
    ConsensusFit,
    ConsensusMethod,
    ImportLabels,
    Project,
    StepRating,
)
from annotation.quality.dawid_skene import dawid_skene_posteriors

logger = logging.getLogger(__name__)

Label = int | None


@dataclass(frozen=True, slots=True)
class Vote:
    """One voter's current labels on one chain: ``labels[i]`` is their rating of step i,
    None where they did not rate it."""

    by: str
    source: str  # AnnotationSource value
    labels: tuple[Label, ...]


@dataclass(frozen=True, slots=True)
class ChainConsensus:
    labels: list[Label]
    support: list[float | None]
    votes: list[Vote] = field(default_factory=list)
    # Per step: the votes tie (no ruling): ``labels`` holds the tie rule's pick, which the
    # pages show as a tie, never as a consensus. Empty for a consensus built without it.
    tied: list[bool] = field(default_factory=list)

    @property
    def has_label(self) -> bool:
        return any(label is not None for label in self.labels)


def step_consensus(ratings: Iterable[int]) -> tuple[Label, float | None]:
    """The winning rating of one step and its support; (None, None) without votes.

    >>> step_consensus([1, 1, -1])
    (1, 0.6666666666666666)
    >>> step_consensus([1, -1])  # a tie goes to the lowest rating
    (-1, 0.5)
    >>> step_consensus([])
    (None, None)
    """
    winner, share, _ = step_tally(ratings)
    return winner, share


def step_tally(ratings: Iterable[int]) -> tuple[Label, float | None, bool]:
    """``step_consensus`` and whether the top count is shared (a tie).

    >>> step_tally([1, -1, 0])
    (-1, 0.3333333333333333, True)
    >>> step_tally([1, 1, -1])
    (1, 0.6666666666666666, False)
    """
    counts = Counter(ratings)
    total = sum(counts.values())
    if not total:
        return None, None, False
    top = max(counts.values())
    tied = [rating for rating, count in counts.items() if count == top]
    return min(tied), top / total, len(tied) > 1


@dataclass(frozen=True, slots=True)
class StepPosterior:
    """Dawid-Skene's label of one step: the most probable rating, its posterior
    probability, and whether another rating is as probable (then ``label`` is the lowest
    of the tied, as in majority vote)."""

    label: int
    probability: float
    tied: bool


def counted_votes(*, votes: Sequence[Vote], import_labels: str) -> list[Vote]:
    """The votes rules 2 and 3 count on one chain: its human votes, plus its import votes
    with ``import_labels == "vote"``, or only its import votes with "fallback" on a chain
    no person rated."""
    human = [vote for vote in votes if vote.source == AnnotationSource.HUMAN]
    imported = [vote for vote in votes if vote.source == AnnotationSource.IMPORT]
    if import_labels == ImportLabels.VOTE:
        return [*human, *imported]
    if import_labels == ImportLabels.FALLBACK and not any(
        label is not None for vote in human for label in vote.labels
    ):
        return imported
    return human


def chain_consensus(
    *,
    step_count: int,
    votes: Sequence[Vote],
    import_labels: str = ImportLabels.FALLBACK,
    learned: Sequence[StepPosterior | None] | None = None,
) -> ChainConsensus:
    """Consensus of every step of one chain from its current votes (see the module
    docstring for the rules). ``votes`` must already hold only current revisions.
    ``learned``: Dawid-Skene's posterior per step index (``DawidSkeneFit.chain``), which
    replaces the majority vote on the steps it covers."""
    adjudications = [vote for vote in votes if vote.source == AnnotationSource.ADJUDICATION]
    # Votes come oldest first, so the last is the current ruling.
    ruling = adjudications[-1] if adjudications else None
    counted = counted_votes(votes=votes, import_labels=import_labels)
    labels: list[Label] = []
    support: list[float | None] = []
    tied: list[bool] = []
    for index in range(step_count):
        if ruling is not None and index < len(ruling.labels) and ruling.labels[index] is not None:
            labels.append(ruling.labels[index])
            support.append(1.0)
            tied.append(False)
            continue
        posterior = learned[index] if learned is not None and index < len(learned) else None
        if posterior is not None:
            labels.append(posterior.label)
            support.append(posterior.probability)
            tied.append(posterior.tied)
            continue
        label, share, tie = step_tally(
            rating
            for vote in counted
            if index < len(vote.labels) and (rating := vote.labels[index]) is not None
        )
        labels.append(label)
        support.append(share)
        tied.append(tie)
    behind = [*counted, ruling] if ruling is not None else list(counted)
    return ChainConsensus(labels=labels, support=support, votes=behind, tied=tied)


def current_votes(
    *, rows: Iterable[tuple[int, int, str, str, int | None, str, datetime, int, int]]
) -> dict[int, list[Vote]]:
    """Group rating rows into current votes per chain.

    Each row is (chain id, annotation id, source, source name, annotator id, annotator
    username, created_at, step index, rating) of an annotation that nothing supersedes.
    Per human annotator only the newest such annotation counts: revisions are linked by
    ``supersedes``, but two unlinked passes by one person (a re-queue) must not count
    twice either. Every import annotation counts (each is a separate source file). Per
    chain only the newest adjudication counts, whoever the lead."""
    # chain id -> voter key -> (created_at, annotation id, by, source, {index: rating})
    latest: dict[int, dict[object, tuple[datetime, int, str, str, dict[int, int]]]] = {}
    for (
        chain_id,
        annotation_id,
        source,
        source_name,
        user_id,
        username,
        created,
        index,
        rating,
    ) in rows:
        voters = latest.setdefault(chain_id, {})
        if source == AnnotationSource.HUMAN:
            key: object = ("human", user_id)
            by = username
        elif source == AnnotationSource.ADJUDICATION:
            key = ("adjudication",)
            # Its own name: the lead may also have voted as an annotator on this chain.
            by = f"adjudication:{username}"
        else:
            key = ("import", annotation_id)
            by = f"import:{source_name}" if source_name else "import"
        held = voters.get(key)
        if held is None or (created, annotation_id) > (held[0], held[1]):
            # The first row of a newer pass replaces whatever older pass was held.
            held = (created, annotation_id, by, source, {})
            voters[key] = held
        if held[1] == annotation_id:  # rows of an older pass are ignored
            held[4][index] = rating
    result: dict[int, list[Vote]] = {}
    for chain_id, voters in latest.items():
        votes = []
        for _, _, by, source, ratings in sorted(voters.values(), key=lambda v: (v[0], v[1])):
            size = max(ratings) + 1 if ratings else 0
            votes.append(
                Vote(by=by, source=source, labels=tuple(ratings.get(i) for i in range(size)))
            )
        result[chain_id] = votes
    return result


def votes_for_chains(*, chain_ids: Sequence[int]) -> dict[int, list[Vote]]:
    """The current votes of these chains, in one query. Chains without any are absent."""
    if not chain_ids:
        return {}
    rows = (
        StepRating.objects.filter(
            annotation__chain_id__in=chain_ids, annotation__superseded_by__isnull=True
        )
        .order_by()
        .values_list(
            "annotation__chain_id",
            "annotation_id",
            "annotation__source",
            "annotation__source_name",
            "annotation__annotator_id",
            "annotation__annotator__username",
            "annotation__created_at",
            "step__index",
            "rating",
        )
    )
    return current_votes(rows=rows.iterator(chunk_size=5000))


def consensus_for_chains(
    *,
    chain_step_counts: Mapping[int, int],
    import_labels: str,
    project: Project | None = None,
    fit: DawidSkeneFit | None = None,
) -> dict[int, ChainConsensus]:
    """Consensus of each chain given as {chain id: step count}, all of one project, by the
    project's ``consensus`` method. Two queries with majority vote (the project, unless
    given, and the votes); Dawid-Skene adds its fit (``dawid_skene_fit``: two queries when
    it is cached) unless the caller passes the ``fit`` to use (a snapshot fits once for
    all its chunks). Chains with no votes get all-None labels."""
    if not chain_step_counts:
        return {}
    if project is None:
        project = Project.objects.filter(chains__pk=next(iter(chain_step_counts))).first()
    votes = votes_for_chains(chain_ids=list(chain_step_counts))
    if fit is None and project is not None and project.consensus == ConsensusMethod.DAWID_SKENE:
        fit = dawid_skene_fit(project=project, import_labels=import_labels)
    return {
        chain_id: chain_consensus(
            step_count=step_count,
            votes=votes.get(chain_id, []),
            import_labels=import_labels,
            learned=fit.chain(chain_id=chain_id) if fit is not None else None,
        )
        for chain_id, step_count in chain_step_counts.items()
    }


# --- Dawid-Skene over a whole project ---------------------------------------------------

# Chains whose votes are loaded at a time while a fit collects a project's votes: memory
# holds the collected votes as three integer arrays and one batch of Vote objects.
FIT_CHAIN_BATCH = 2000
# The newest fits this process used, by project, rule and stamp, so pages and snapshots
# do not read and unpack the stored one each time; web threads share it, hence the lock.
_RECENT_FITS: dict[tuple[int, str], tuple[str, DawidSkeneFit]] = {}
_RECENT_FITS_MAX = 4
_RECENT_FITS_LOCK = threading.Lock()
# The high half of the advisory lock a project's fit is made under (the low half is the
# project's id), apart from the other advisory locks' namespaces.
_FIT_LOCK_NAMESPACE = 0x44534654  # "DSFT"
# Without PostgreSQL (the embedded SQLite default) one process's threads take turns here.
_FIT_THREAD_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class DawidSkeneFit:
    """Dawid-Skene's posterior of every voted step of a project, as arrays: the project's
    voted chains in id order, each owning ``lengths[c]`` consecutive entries from
    ``starts[c]`` (one per step index) of ``labels``, ``probability``, ``tied`` and
    ``voted`` (False: nobody counted rated that step)."""

    chain_ids: np.ndarray  # int64 [C], ascending
    starts: np.ndarray  # int64 [C]
    lengths: np.ndarray  # int64 [C]
    voted: np.ndarray  # bool [T]
    labels: np.ndarray  # int8 [T]
    probability: np.ndarray  # float64 [T]
    tied: np.ndarray  # bool [T]
    # Voter name (as ``Vote.by``) -> estimated accuracy (0..1).
    reliability: dict[str, float]
    votes: int
    gold_steps: int
    iterations: int
    seconds: float

    def chain(self, *, chain_id: int) -> list[StepPosterior | None]:
        """The posterior per step index of one chain; [] for a chain without counted votes."""
        at = int(np.searchsorted(self.chain_ids, chain_id))
        if at >= len(self.chain_ids) or int(self.chain_ids[at]) != chain_id:
            return []
        start, length = int(self.starts[at]), int(self.lengths[at])
        return [
            StepPosterior(
                label=int(self.labels[task]),
                probability=float(self.probability[task]),
                tied=bool(self.tied[task]),
            )
            if self.voted[task]
            else None
            for task in range(start, start + length)
        ]


def _fit_stamp(*, project: Project, import_labels: str) -> str:
    """A stamp that changes whenever the fit's input may: annotations are only ever added
    (a correction is a new row), so their count and newest id move with every vote, and
    a gold chain marked or unmarked moves the gold count or the sum of answer-key ids.
    Adjudications are no votes: a lead ruling chain after chain does not refit each time
    (a ruling that becomes a gold answer key moves the gold sum). Two queries."""
    votes = [AnnotationSource.HUMAN, AnnotationSource.IMPORT]
    annotations = Annotation.objects.filter(chain__project=project, source__in=votes).aggregate(
        newest=Max("id"), count=Count("id")
    )
    gold = Chain.objects.filter(project=project, is_gold=True).aggregate(
        count=Count("id"), keys=Sum("gold_annotation_id")
    )
    # created_at too: a database that reuses ids (SQLite) must not meet an old fit.
    return (
        f"{project.created_at.timestamp()}:{annotations['newest']}:{annotations['count']}:"
        f"{gold['count']}:{gold['keys']}"
    )


def dawid_skene_fit(*, project: Project, import_labels: str | None = None) -> DawidSkeneFit:
    """Dawid-Skene fitted over every vote the project's consensus counts (rules 2 and 3:
    current human passes, and import labels as ``import_labels`` says, by default the
    project's), with the gold chains' answer keys held fixed.

    Fitted once per label state (``_fit_stamp``) for every process: the fit is stored in
    ``ConsensusFit`` with its stamp and read back while the stamp holds. When none is
    current, one process at a time fits the project, under the project's advisory lock
    (``_fit_lock``); the others wait on the lock and then read the fit it stored rather
    than fitting again. Two queries when this process holds the current fit; three when
    another one stored it; else also the voted chains and their votes in batches of
    FIT_CHAIN_BATCH chains, and the answer keys."""
    import_labels = import_labels or project.import_labels
    stamp = _fit_stamp(project=project, import_labels=import_labels)
    fit = _recent_fit(project=project, import_labels=import_labels, stamp=stamp)
    if fit is None:
        fit = _stored_fit(project=project, import_labels=import_labels, stamp=stamp)
    if fit is None:
        stamp, fit = _fit_shared(project=project, import_labels=import_labels)
    _remember(project=project, import_labels=import_labels, stamp=stamp, fit=fit)
    return fit


def dawid_skene_fit_current(
    *, project: Project, import_labels: str | None = None
) -> DawidSkeneFit | None:
    """The project's stored Dawid-Skene fit if it is still current, else None: never
    fits (the pages of a majority-vote project show a fit only if one was made)."""
    import_labels = import_labels or project.import_labels
    stamp = _fit_stamp(project=project, import_labels=import_labels)
    fit = _recent_fit(project=project, import_labels=import_labels, stamp=stamp)
    if fit is None:
        fit = _stored_fit(project=project, import_labels=import_labels, stamp=stamp)
    if fit is not None:
        _remember(project=project, import_labels=import_labels, stamp=stamp, fit=fit)
    return fit


def _recent_fit(*, project: Project, import_labels: str, stamp: str) -> DawidSkeneFit | None:
    with _RECENT_FITS_LOCK:
        held = _RECENT_FITS.get((project.pk, import_labels))
    return held[1] if held is not None and held[0] == stamp else None


def _remember(*, project: Project, import_labels: str, stamp: str, fit: DawidSkeneFit) -> None:
    key = (project.pk, import_labels)
    with _RECENT_FITS_LOCK:
        _RECENT_FITS.pop(key, None)
        _RECENT_FITS[key] = (stamp, fit)
        while len(_RECENT_FITS) > _RECENT_FITS_MAX:
            _RECENT_FITS.pop(next(iter(_RECENT_FITS)), None)


def _stored_fit(*, project: Project, import_labels: str, stamp: str) -> DawidSkeneFit | None:
    """The stored fit of this label state, if any. One query."""
    data = (
        ConsensusFit.objects.filter(project=project, import_labels=import_labels, stamp=stamp)
        .values_list("data", flat=True)
        .first()
    )
    return fit_from_bytes(bytes(data)) if data is not None else None


def _fit_shared(*, project: Project, import_labels: str) -> tuple[str, DawidSkeneFit]:
    """Fit the project and store the fit, one process at a time: under the lock, the
    label state is read again and a fit another process stored meanwhile is used."""
    with transaction.atomic(), _fit_lock(project=project):
        stamp = _fit_stamp(project=project, import_labels=import_labels)
        fit = _stored_fit(project=project, import_labels=import_labels, stamp=stamp)
        if fit is not None:
            return stamp, fit
        fit = _fit(project=project, import_labels=import_labels)
        ConsensusFit.objects.update_or_create(
            project=project,
            import_labels=import_labels,
            defaults={
                "stamp": stamp,
                "data": fit_to_bytes(fit),
                "seconds": fit.seconds,
                "fitted_at": timezone.now(),
            },
        )
    logger.info(
        "Dawid-Skene fit of project %s (%s): %d votes, %.2f s",
        project.pk,
        import_labels,
        fit.votes,
        fit.seconds,
    )
    return stamp, fit


@contextmanager
def _fit_lock(*, project: Project) -> Iterator[None]:
    """Hold the project's fit lock until the surrounding transaction ends: an advisory
    lock on PostgreSQL (every process and host), a thread lock otherwise (one process:
    the embedded default runs one web process)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_advisory_xact_lock(%s)",
                [(_FIT_LOCK_NAMESPACE << 32) | (project.pk & 0xFFFFFFFF)],
            )
        yield
        return
    with _FIT_THREAD_LOCK:
        yield


def fit_to_bytes(fit: DawidSkeneFit) -> bytes:
    """The fit as an .npz archive (arrays, and the rest as JSON): no pickle, so a
    stored row can hold nothing but data."""
    out = io.BytesIO()
    rest = {
        "reliability": fit.reliability,
        "votes": fit.votes,
        "gold_steps": fit.gold_steps,
        "iterations": fit.iterations,
        "seconds": fit.seconds,
    }
    np.savez_compressed(
        out,
        **{name: getattr(fit, name) for name in _FIT_ARRAYS},
        rest=np.frombuffer(json.dumps(rest).encode(), dtype=np.uint8),
    )
    return out.getvalue()


def fit_from_bytes(data: bytes) -> DawidSkeneFit:
    with np.load(io.BytesIO(data), allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in _FIT_ARRAYS}
        rest = json.loads(archive["rest"].tobytes())
    return DawidSkeneFit(**arrays, **rest)


_FIT_ARRAYS = ("chain_ids", "starts", "lengths", "voted", "labels", "probability", "tied")


def _fit(*, project: Project, import_labels: str) -> DawidSkeneFit:
    began = time.perf_counter()
    tasks, workers, ratings = array("q"), array("q"), array("q")
    chain_ids, starts, lengths = array("q"), array("q"), array("q")
    names: dict[str, int] = {}
    annotated = Chain.objects.filter(project=project).filter(
        Exists(Annotation.objects.filter(chain=OuterRef("pk")))
    )
    next_task = 0
    last_id = 0
    while True:
        batch = list(
            annotated.filter(pk__gt=last_id)
            .order_by("pk")
            .values_list("pk", flat=True)[:FIT_CHAIN_BATCH]
        )
        if not batch:
            break
        last_id = batch[-1]
        votes = votes_for_chains(chain_ids=batch)
        for chain_id in batch:
            counted = counted_votes(votes=votes.get(chain_id, []), import_labels=import_labels)
            length = max((len(vote.labels) for vote in counted), default=0)
            if not length:
                continue
            chain_ids.append(chain_id)
            starts.append(next_task)
            lengths.append(length)
            for vote in counted:
                worker = names.setdefault(vote.by, len(names))
                for index, rating in enumerate(vote.labels):
                    if rating is not None:
                        tasks.append(next_task + index)
                        workers.append(worker)
                        ratings.append(rating)
            next_task += length
    chain_array = np.frombuffer(chain_ids, dtype=np.int64)
    start_array = np.frombuffer(starts, dtype=np.int64)
    length_array = np.frombuffer(lengths, dtype=np.int64)
    gold = _gold_tasks(
        project=project, chain_ids=chain_array, starts=start_array, lengths=length_array
    )
    posteriors = dawid_skene_posteriors(
        steps=np.frombuffer(tasks, dtype=np.int64),
        workers=np.frombuffer(workers, dtype=np.int64),
        ratings=np.frombuffer(ratings, dtype=np.int64),
        worker_count=len(names),
        gold=gold,
    )
    voted = np.zeros(next_task, dtype=bool)
    labels = np.zeros(next_task, dtype=np.int8)
    probability = np.zeros(next_task, dtype=np.float64)
    tied = np.zeros(next_task, dtype=bool)
    voted[posteriors.steps] = True
    labels[posteriors.steps] = posteriors.labels
    probability[posteriors.steps] = posteriors.probability
    tied[posteriors.steps] = posteriors.tied
    return DawidSkeneFit(
        chain_ids=chain_array.copy(),
        starts=start_array.copy(),
        lengths=length_array.copy(),
        voted=voted,
        labels=labels,
        probability=probability,
        tied=tied,
        reliability={
            name: float(posteriors.reliability[worker])
            for name, worker in names.items()
            if not np.isnan(posteriors.reliability[worker])
        },
        votes=len(tasks),
        gold_steps=len(gold),
        iterations=posteriors.iterations,
        seconds=time.perf_counter() - began,
    )


def _gold_tasks(
    *, project: Project, chain_ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray
) -> dict[int, int]:
    """Task id -> the answer key's rating, for the steps of the project's gold chains that
    have votes. One query."""
    keys = Chain.objects.filter(project=project, is_gold=True).values("gold_annotation_id")
    gold: dict[int, int] = {}
    rows = StepRating.objects.filter(annotation_id__in=keys).values_list(
        "annotation__chain_id", "step__index", "rating"
    )
    for chain_id, index, rating in rows:
        at = int(np.searchsorted(chain_ids, chain_id))
        if at < len(chain_ids) and int(chain_ids[at]) == chain_id and index < lengths[at]:
            gold[int(starts[at]) + index] = rating
    return gold
