"""The consensus fit: Dawid-Skene over every counted vote of a project
(``dawid_skene_fit``), with the gold chains' answer keys held fixed, fitted once per
label state for every process (stored in ``ConsensusFit``, made under the project's
advisory lock, the newest few kept in memory). ``annotation.quality.dawid_skene`` holds
the model itself; ``annotation.quality.consensus`` reads a step's label from the fit."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from django.db import connection, transaction
from django.db.models import Count, Exists, Max, OuterRef, Sum
from django.utils import timezone

from annotation.models import (
    Annotation,
    AnnotationSource,
    Chain,
    ConsensusFit,
    Project,
    StepRating,
)
from annotation.quality.dawid_skene import dawid_skene_posteriors
from annotation.quality.votes import counted_votes, votes_for_chains

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StepPosterior:
    """Dawid-Skene's label of one step: the most probable rating, its posterior
    probability, and whether another rating is as probable (then ``label`` is the lowest
    of the tied, as in majority vote)."""

    label: int
    probability: float
    tied: bool


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
