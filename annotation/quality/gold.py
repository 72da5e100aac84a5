"""Gold chains: answer keys mixed into the queue to measure annotators, and screening.

A gold chain (``Chain.is_gold``) carries its answer key in ``Chain.gold_annotation``: the
chain's current adjudication if a lead ruled on it, else its import annotation (labels
that came with an import). A chain with neither cannot be gold.

The queue (``annotation.labeling.queue.claim._claim_once``) asks ``gold_candidate`` before
its normal candidate query, and the normal query never returns a gold chain:

* a gold chain is offered to every annotator once, whatever the overlap, and a pass over
  it does not count toward ``Chain.finished_count`` (it is a test, not real work);
* with ``Project.gold_rate`` r, a claim is gold with probability r while the annotator has
  a gold chain they have not done. The draw is a keyed hash of (project, annotator, number
  of leases the annotator took in the project) unless a random source is injected, so a
  run is reproducible, two annotators do not get gold on the same beat, and no annotator
  can work out which of their claims will be gold (they know all three, not the key);
* the gold chain drawn is the next of the annotator's own order of the project's gold
  chains, a keyed shuffle (``annotation.quality.gold_reads.gold_order_key``): never id
  order, which put gold imported after the real work in a sequence of its own;
* with ``Project.screening_chains`` N > 0, an annotator (role "annotator") who has not
  passed gets only gold chains, N of them (the first N of the project's keyed shuffle, the
  same set for everyone), then is scored: a step accuracy of at least
  ``screening_pass_accuracy`` passes, less fails, and a failed annotator gets nothing
  more until a lead resets the screening.

Nothing here tells the annotator a chain is gold: the lease and its payload are the same
as for any chain (the ids in it are the annotator's own public ids,
``annotation.public_ids``, so annotators who pool theirs cannot count who met a chain), a
gold claim runs the statements a real one does (the gold query and the real work's
candidate query, each locking its row, then the same lease statement:
``labeling.queue.claim._gold_chain``), and a submit records an ordinary human annotation
that writes and sends what a real pass does (``labeling.queue.submit_writes.Standing``).

What stays observable: the texts. A gold chain is offered to every annotator, so
annotators who compare the problems they were given can find the ones more of them met
than the overlap allows. Keep the gold pool large against the number of annotators who
might compare notes, and refresh it (the README's gold section says so).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone

from annotation.chains.changes import (
    NOT_IN_PROJECT,
    Changed,
    chain_events_record,
    chains_lock_sorted,
)
from annotation.labeling.queue.closed_leases import closed_leases_sync
from annotation.models import (
    Annotation,
    AnnotationSource,
    Assignment,
    AssignmentStatus,
    BulkAction,
    Chain,
    ChainEventKind,
    ImportBatch,
    Membership,
    Project,
    Screening,
    ScreeningStatus,
)
from annotation.public_ids import keyed_share
from annotation.quality.chain_agreement import chains_agreement_refresh
from annotation.quality.gold_reads import (
    ScreeningState,
    screening_applies,
    screening_state_get,
)

if TYPE_CHECKING:
    from django.contrib.auth.models import User

# A source of uniform floats in [0, 1); ``random.Random(seed).random`` in tests.
RandomSource = Callable[[], float]


# --- marking -------------------------------------------------------------------------------


def _answer_keys(
    *, chain_ids: Sequence[int], import_batch: ImportBatch | None = None
) -> dict[int, int]:
    """chain id -> the annotation that is its answer key: the newest current adjudication,
    else the newest current import annotation (of ``import_batch`` when given). Chains
    with neither are absent. One query."""
    sources = [AnnotationSource.ADJUDICATION, AnnotationSource.IMPORT]
    candidates = Annotation.objects.filter(
        chain_id__in=list(chain_ids), source__in=sources, superseded_by__isnull=True
    )
    if import_batch is not None:
        candidates = candidates.filter(
            Q(source=AnnotationSource.ADJUDICATION) | Q(import_batch=import_batch)
        )
    keys: dict[int, tuple[int, int]] = {}
    rows = candidates.order_by("created_at", "id").values_list("id", "chain_id", "source")
    for annotation_id, chain_id, source in rows:
        rank = 1 if source == AnnotationSource.ADJUDICATION else 0
        # Later rows are newer: they win within a rank; an adjudication beats an import.
        if chain_id not in keys or rank >= keys[chain_id][0]:
            keys[chain_id] = (rank, annotation_id)
    return {chain_id: annotation_id for chain_id, (_rank, annotation_id) in keys.items()}


NO_ANSWER_KEY = "no answer key (an adjudication or labels from an import)"
NOT_GOLD = "not gold"
# Gold chains are leased (to every annotator); an evaluation set's never are.
IN_EVALUATION_SET = "in an evaluation set"


def _has_answer_key() -> Exists:
    """Whether the chain (the outer query's row) has what ``_answer_keys`` would take."""
    return Exists(
        Annotation.objects.filter(
            chain=OuterRef("pk"),
            source__in=[AnnotationSource.ADJUDICATION, AnnotationSource.IMPORT],
            superseded_by__isnull=True,
        )
    )


def gold_mark_reasons() -> dict[str, Q]:
    """Why ``chains_gold_mark`` leaves a chain as it is."""
    return {
        IN_EVALUATION_SET: Q(evaluation_set__isnull=False),
        NO_ANSWER_KEY: ~Q(_has_answer_key()),
    }


def gold_unmark_reasons() -> dict[str, Q]:
    """Why ``chains_gold_unmark`` leaves a chain as it is."""
    return {NOT_GOLD: Q(is_gold=False)}


def _named(chain_ids: Iterable[int]) -> list[int]:
    wanted = sorted(set(chain_ids))
    if not wanted:
        raise ValidationError({"chain_ids": "Name at least one chain."})
    return wanted


def _refuse_missing(outcome: Changed) -> None:
    """Ids that are no chains of the project are refused without saying whether they
    exist elsewhere."""
    missing = outcome.left_for(NOT_IN_PROJECT)
    if missing:
        raise ValidationError(
            {"chain_ids": f"Not chains of this project: {', '.join(map(str, missing))}."}
        )


def chains_gold_mark(
    *,
    project: Project,
    chain_ids: Iterable[int],
    actor: User | None = None,
    bulk_action: BulkAction | None = None,
    now: datetime | None = None,
    import_batch: ImportBatch | None = None,
) -> Changed:
    """Make each chain gold with its answer key (the module docstring; of
    ``import_batch``'s labels when given), leaving those without one
    (``gold_mark_reasons``). Marking a gold chain again refreshes its answer key (say
    after a new adjudication). The caller checks that the user leads the project."""
    now = now or timezone.now()
    with transaction.atomic():
        outcome = chains_lock_sorted(
            project=project, chain_ids=chain_ids, reasons=gold_mark_reasons()
        )
        keys = _answer_keys(chain_ids=outcome.changed, import_batch=import_batch)
        keyless = [chain_id for chain_id in outcome.changed if chain_id not in keys]
        if keyless:  # an import's labels that another import's superseded
            outcome.unchanged.setdefault(NO_ANSWER_KEY, []).extend(keyless)
            outcome.changed = [chain_id for chain_id in outcome.changed if chain_id in keys]
        chains = [
            Chain(pk=chain_id, is_gold=True, gold_annotation_id=keys[chain_id])
            for chain_id in outcome.changed
        ]
        Chain.objects.bulk_update(chains, ["is_gold", "gold_annotation"], batch_size=1000)
        closed_leases_sync(leases=Assignment.objects.filter(chain_id__in=outcome.changed))
        chain_events_record(
            chain_ids=outcome.changed,
            kind=ChainEventKind.GOLD_MARKED,
            actor=actor,
            now=now,
            detail=lambda chain_id: {"answer_key": keys[chain_id]},
            bulk_action=bulk_action,
        )
    return outcome


def gold_mark(
    *, project: Project, chain_ids: Iterable[int], actor: User | None = None
) -> list[int]:
    """``chains_gold_mark``, all or nothing: a chain of another project, or one without
    an adjudication or import labels, raises ValidationError naming it. The ids marked."""
    with transaction.atomic():
        outcome = chains_gold_mark(project=project, chain_ids=_named(chain_ids), actor=actor)
        _refuse_missing(outcome)
        held_out = outcome.left_for(IN_EVALUATION_SET)
        if held_out:
            raise ValidationError(
                {
                    "chain_ids": "Chains of an evaluation set are never leased, so they cannot "
                    f"be gold: {', '.join(map(str, held_out))}."
                }
            )
        unlabeled = outcome.left_for(NO_ANSWER_KEY)
        if unlabeled:
            raise ValidationError(
                {
                    "chain_ids": "A gold chain needs known labels (an adjudication or labels "
                    "from an import); these have none: "
                    f"{', '.join(map(str, unlabeled))}."
                }
            )
    return outcome.changed


def gold_mark_from_import(
    *, project: Project, import_batch_id: int, actor: User | None = None
) -> list[int]:
    """Make gold every chain to which the import ``import_batch_id`` of ``project`` brought
    labels; the answer key is the chain's adjudication if any, else that import's labels.
    Raises ImportBatch.DoesNotExist for an import of another project, ValidationError
    for an import that carried no labels. The ids marked."""
    batch = ImportBatch.objects.get(pk=import_batch_id, project=project)
    with transaction.atomic():
        chain_ids = (
            Annotation.objects.filter(import_batch=batch, source=AnnotationSource.IMPORT)
            .values_list("chain_id", flat=True)
            .distinct()
        )
        ids = list(chain_ids)
        if not ids:
            raise ValidationError({"import_batch": "This import carried no labels."})
        outcome = chains_gold_mark(project=project, chain_ids=ids, actor=actor, import_batch=batch)
    return outcome.changed


def chains_gold_unmark(
    *,
    project: Project,
    chain_ids: Iterable[int],
    actor: User | None = None,
    bulk_action: BulkAction | None = None,
    now: datetime | None = None,
) -> Changed:
    """Return gold chains to ordinary work; chains that are not gold are left. The passes
    annotators made over them while gold now count: ``finished_count`` becomes the number
    of annotators who labeled the chain, ``is_finished`` follows the overlap and
    ``agreement`` the passes."""
    now = now or timezone.now()
    with transaction.atomic():
        outcome = chains_lock_sorted(
            project=project, chain_ids=chain_ids, reasons=gold_unmark_reasons()
        )
        chains = list(Chain.objects.filter(pk__in=outcome.changed).only("pk", "extra_labels"))
        done = dict(
            Annotation.objects.filter(
                chain_id__in=outcome.changed,
                source=AnnotationSource.HUMAN,
                superseded_by__isnull=True,
            )
            .values("chain_id")
            .annotate(annotators=Count("annotator", distinct=True))
            .values_list("chain_id", "annotators")
        )
        for chain in chains:
            chain.is_gold = False
            chain.gold_annotation = None
            chain.finished_count = done.get(chain.pk, 0)
            chain.is_finished = chain.finished_count >= project.overlap + chain.extra_labels
        Chain.objects.bulk_update(
            chains,
            ["is_gold", "gold_annotation", "finished_count", "is_finished"],
            batch_size=1000,
        )
        chains_agreement_refresh(chains=Chain.objects.filter(pk__in=outcome.changed))
        closed_leases_sync(leases=Assignment.objects.filter(chain_id__in=outcome.changed))
        chain_events_record(
            chain_ids=outcome.changed,
            kind=ChainEventKind.GOLD_UNMARKED,
            actor=actor,
            now=now,
            bulk_action=bulk_action,
        )
    return outcome


def gold_unmark(
    *, project: Project, chain_ids: Iterable[int], actor: User | None = None
) -> list[int]:
    """``chains_gold_unmark``, refusing ids that are no chains of the project. The ids
    returned to ordinary work."""
    with transaction.atomic():
        outcome = chains_gold_unmark(project=project, chain_ids=_named(chain_ids), actor=actor)
        _refuse_missing(outcome)
    return outcome.changed


# --- the queue mix-in ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GoldPick:
    """What ``gold_candidate`` decided for one claim: lease the screening's gold chain
    ``chain_id``, or lease the caller's next gold chain (``drawn``: the gold draw chose
    gold; the queue's own query finds the chain, ``labeling.queue.sql.GOLD_CANDIDATE_SQL``,
    and the normal queue's candidate when none is left), or answer nothing-left
    (``blocked``: screening failed, or pending with no gold chain to give), or, with none
    of these, go on with the normal queue."""

    chain_id: int | None = None
    blocked: bool = False
    drawn: bool = False


NORMAL = GoldPick()
BLOCKED = GoldPick(blocked=True)
DRAWN = GoldPick(drawn=True)


def gold_draw(*, project_id: int, user_id: int, claim_number: int) -> float:
    """A uniform number in [0, 1) fixed by who claims and how many leases they took, keyed
    with a secret so that the annotator, who knows all three, cannot compute it.

    >>> gold_draw(project_id=1, user_id=2, claim_number=3) == gold_draw(
    ...     project_id=1, user_id=2, claim_number=3)
    True
    """
    return keyed_share("gold-draw", project_id, user_id, claim_number)


def gold_pass_place(*, chain_id: int, user_id: int, passes: int) -> int:
    """Which of a chain's ``passes`` (1 .. passes) a pass over a gold chain looks like: a
    keyed draw per chain and annotator, uniform like the place of a real pass among its
    chain's passes. A gold pass counts for nothing, but it writes what a real pass at
    that place writes (``labeling.queue.submit_writes``), the one that finishes a chain
    included, so its time tells no annotator that it was gold.

    >>> 1 <= gold_pass_place(chain_id=7, user_id=2, passes=3) <= 3
    True
    """
    return 1 + int(keyed_share("gold-pass-place", chain_id, user_id) * max(passes, 1))


def _role(*, project: Project, user: User) -> str | None:
    if user.is_superuser:
        return None  # not an annotator of the project: never screened
    return (
        Membership.objects.filter(project=project, user=user).values_list("role", flat=True).first()
    )


def screening_refresh(
    *, project: Project, user: User, now: datetime, row: Screening | None = None
) -> ScreeningState:
    """``user``'s screening state, storing a decision the moment it is reached (a Screening
    row that is then frozen). Call inside a transaction that holds the user's claim lock
    (``_claim_once`` does), so two claims cannot decide twice."""
    state = screening_state_get(project=project, user=user, now=now, row=row)
    if state.decide:
        Screening.objects.update_or_create(
            project=project,
            annotator=user,
            defaults={
                "status": state.status,
                "decided_at": now,
                "chains": state.done,
                "steps_compared": state.steps_compared,
                "steps_correct": state.steps_correct,
                "step_accuracy": state.step_accuracy,
            },
        )
    return state


def gold_candidate(
    *,
    project: Project,
    user: User,
    now: datetime,
    rng: RandomSource | None = None,
) -> GoldPick:
    """Decide whether this claim of ``user`` in ``project`` gets a gold chain.

    Returns NORMAL without a query when the project uses neither gold nor screening.
    Under screening (annotators who have not passed) the pick is the next screening chain,
    or BLOCKED when failed or when no gold chain is left to screen with. Otherwise, with
    probability ``gold_rate`` (drawn from ``rng``, else from ``gold_draw``), DRAWN: the
    claim leases the next gold chain the user has not done in their own shuffled order
    (``gold_reads.gold_order_key``), if any, by the same statements as real work.

    Precondition: called by the claim, holding the user's claim lock."""
    if not project.gold_rate and not project.screening_chains:
        return NORMAL
    if project.screening_chains:
        row = Screening.objects.filter(project=project, annotator=user).first()
        if row is None or row.status != ScreeningStatus.PASSED:
            if screening_applies(project=project, role=_role(project=project, user=user)):
                state = screening_refresh(project=project, user=user, now=now, row=row)
                if state.status == ScreeningStatus.FAILED:
                    return BLOCKED
                if state.status == ScreeningStatus.PENDING:
                    if state.next_chain is None:
                        return BLOCKED
                    return GoldPick(chain_id=state.next_chain.pk)
    if not project.gold_rate:
        return NORMAL
    if rng is not None:
        draw = rng()
    else:
        claims = Assignment.objects.filter(project=project, annotator=user).count()
        draw = gold_draw(project_id=project.pk, user_id=user.pk, claim_number=claims)
    return DRAWN if draw < project.gold_rate else NORMAL


def gold_place_is_free(*, chain: Chain, user: User) -> bool:
    """Whether ``user`` may still submit a pass over the gold ``chain`` (for an expired
    lease): they have not submitted, skipped or annotated it. Gold has no overlap."""
    done = Assignment.objects.filter(
        chain=chain,
        annotator=user,
        status__in=[AssignmentStatus.SUBMITTED, AssignmentStatus.SKIPPED],
    ).exists()
    return not done and not (
        Annotation.objects.filter(
            chain=chain, annotator=user, source=AnnotationSource.HUMAN
        ).exists()
    )


# --- screening -------------------------------------------------------------------------------


def screening_reset(
    *,
    project: Project,
    annotator: User,
    by: User,
    now: datetime | None = None,
) -> Screening:
    """Give ``annotator`` a new screening attempt: pending again, scored only on gold
    chains labeled from now on (so on gold chains they have not seen). Raises
    ValidationError unless the annotator is a member whose screening was decided."""
    now = now if now is not None else timezone.now()
    if not Membership.objects.filter(project=project, user=annotator).exists():
        raise Screening.DoesNotExist("Not a member of this project.")
    with transaction.atomic():
        row = (
            Screening.objects.select_for_update()
            .filter(project=project, annotator=annotator)
            .first()
        )
        if row is None or row.status == ScreeningStatus.PENDING:
            raise ValidationError(
                {"screening": "This annotator's screening is still pending; nothing to reset."}
            )
        row.status = ScreeningStatus.PENDING
        row.started_at = now
        row.decided_at = None
        row.chains = 0
        row.steps_compared = 0
        row.steps_correct = 0
        row.step_accuracy = None
        row.resets += 1
        row.reset_by = by
        row.save()
    return row
