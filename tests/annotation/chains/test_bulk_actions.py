"""The data manager's bulk actions: each action on a selection and on a filter, batch
by batch, through the single-chain services; the preview's counts; one transaction (a
failure in a later batch leaves nothing done); each changed chain's history; the
progress another connection sees while it runs."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.db import connections

from annotation import progress
from annotation.chains import bulk_actions
from annotation.chains.bulk_actions import (
    Selection,
    bulk_action_create,
    bulk_action_execute,
    bulk_action_preview,
)
from annotation.chains.selectors import ChainFilters, ChainStatus, chain_list
from annotation.chains.services import chain_requeue, chains_reviewer_set
from annotation.labeling.workspace import chain_flag_clear
from annotation.models import (
    BulkActionStatus,
    Chain,
    ChainEvent,
    ChainEventKind,
    Role,
)
from annotation.quality.gold import gold_mark
from tests.annotation.chains.bulk_lab import bulk_run
from tests.factories import ChainFactory, MembershipFactory, ProjectFactory, annotation_with_ratings

pytestmark = pytest.mark.django_db


@pytest.fixture
def lab(monkeypatch: Any) -> dict[str, Any]:
    """A project with a lead, another lead, an annotator; twelve chains: four finished,
    two of them gold, three flagged, two with imported labels (answer keys)."""
    # The tests run the task's body themselves: no task is sent.
    monkeypatch.setattr(bulk_actions, "bulk_action_enqueue", lambda *, job_id: None)
    project = ProjectFactory(overlap=1)
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    other_lead = MembershipFactory(project=project, role=Role.LEAD).user
    annotator = MembershipFactory(project=project, role=Role.ANNOTATOR).user
    chains = [ChainFactory(project=project, step_count=3) for _ in range(12)]
    ids = [chain.pk for chain in chains]
    Chain.objects.filter(pk__in=ids[:4]).update(finished_count=1, is_finished=True)
    Chain.objects.filter(pk__in=ids[4:7]).update(is_flagged=True, flag_reason="garbled")
    for chain in chains[:2] + chains[7:9]:
        annotation_with_ratings(chain=chain, labels=[1, 1, -1])
    gold_mark(project=project, chain_ids=ids[:2])
    ChainEvent.objects.all().delete()  # the set-up's own history
    return {
        "project": project,
        "lead": lead,
        "other_lead": other_lead,
        "annotator": annotator,
        "ids": ids,
    }


def _events(kind: str) -> list[int]:
    return sorted(ChainEvent.objects.filter(kind=kind).values_list("chain_id", flat=True))


def test_requeue_on_a_selection_changes_the_chains_and_records_each(lab) -> None:
    ids = lab["ids"]
    preview = bulk_action_preview(
        project=lab["project"],
        kind="requeue",
        params={"more": 2},
        selection=Selection(chain_ids=tuple(ids[:6])),
    )
    assert (preview.matched, preview.changed) == (6, 4)
    assert preview.unchanged == {"gold (offered to everyone already)": 2}

    job = bulk_run(lab, "requeue", Selection(chain_ids=tuple(ids[:6])), more=2)

    assert (job.status, job.matched, job.changed) == (BulkActionStatus.DONE, 6, 4)
    assert job.unchanged == {"gold (offered to everyone already)": 2}
    requeued = Chain.objects.filter(pk__in=ids[2:6]).order_by("pk")
    assert [(c.extra_labels, c.is_finished) for c in requeued] == [(2, False)] * 2 + [
        (1, False)
    ] * 2
    events = ChainEvent.objects.filter(kind=ChainEventKind.REQUEUED).order_by("chain_id")
    assert [e.chain_id for e in events] == ids[2:6]
    assert {(e.actor_id, e.bulk_action_id) for e in events} == {(lab["lead"].pk, job.pk)}
    assert [e.detail for e in events][:1] == [{"more": 2, "needed": 3}]


def test_unflag_on_a_filter_walks_it_batch_by_batch(lab, monkeypatch: Any) -> None:
    monkeypatch.setattr(bulk_actions, "BATCH_CHAINS", 2)
    flagged = Selection(filters=ChainFilters(statuses=(ChainStatus.FLAGGED,)))
    preview = bulk_action_preview(
        project=lab["project"], kind="unflag", params={}, selection=flagged
    )
    assert (preview.matched, preview.changed, preview.unchanged) == (3, 3, {})

    job = bulk_run(lab, "unflag", flagged)

    assert (job.status, job.matched, job.changed) == (BulkActionStatus.DONE, 3, 3)
    assert not Chain.objects.filter(project=lab["project"], is_flagged=True).exists()
    assert set(
        Chain.objects.filter(pk__in=lab["ids"][4:7]).values_list("flag_cleared_by", flat=True)
    ) == {lab["lead"].pk}
    assert _events(ChainEventKind.UNFLAGGED) == lab["ids"][4:7]
    assert ChainEvent.objects.get(chain_id=lab["ids"][4]).detail == {"flag_reason": "garbled"}


def test_mark_gold_on_every_chain_leaves_those_without_an_answer_key(lab, monkeypatch) -> None:
    monkeypatch.setattr(bulk_actions, "BATCH_CHAINS", 5)
    everything = Selection(filters=ChainFilters())

    job = bulk_run(lab, "gold_mark", everything)

    assert (job.matched, job.changed) == (12, 4)  # the two gold (re-keyed) and two keyed
    assert job.unchanged == {"no answer key (an adjudication or labels from an import)": 8}
    gold = Chain.objects.filter(project=lab["project"], is_gold=True)
    assert sorted(gold.values_list("pk", flat=True)) == sorted(lab["ids"][:2] + lab["ids"][7:9])
    assert _events(ChainEventKind.GOLD_MARKED) == sorted(lab["ids"][:2] + lab["ids"][7:9])


def test_unmark_gold_and_reviewer_on_a_selection(lab) -> None:
    ids = lab["ids"]
    unmark = bulk_run(lab, "gold_unmark", Selection(chain_ids=tuple(ids[:3])))
    assert (unmark.changed, unmark.unchanged) == (2, {"not gold": 1})
    assert not Chain.objects.filter(pk__in=ids[:3], is_gold=True).exists()

    named = bulk_run(
        lab, "reviewer", Selection(chain_ids=tuple(ids[:5])), reviewer=lab["other_lead"].pk
    )
    again = bulk_run(
        lab, "reviewer", Selection(chain_ids=tuple(ids[:6])), reviewer=lab["other_lead"].pk
    )

    assert (named.changed, again.changed) == (5, 1)
    assert again.unchanged == {"already has this reviewer": 5}
    mine = chain_list(
        project=lab["project"], filters=ChainFilters(reviewer=lab["other_lead"].pk)
    ).rows
    assert [row.chain_id for row in mine] == ids[:6]
    assert {row.reviewer for row in mine} == {lab["other_lead"].username}
    ChainEvent.objects.filter(kind=ChainEventKind.REVIEWER).values_list("detail", flat=True)
    event = ChainEvent.objects.filter(kind=ChainEventKind.REVIEWER).first()
    assert event is not None and event.detail == {"reviewer": lab["other_lead"].username}
    cleared = bulk_run(lab, "reviewer", Selection(chain_ids=tuple(ids[:2])), reviewer=None)
    assert cleared.changed == 2
    assert Chain.objects.filter(pk__in=ids[:2], reviewer__isnull=True).count() == 2


def test_a_reviewer_must_lead_the_project(lab) -> None:
    with pytest.raises(ValidationError, match="lead"):
        bulk_action_preview(
            project=lab["project"],
            kind="reviewer",
            params={"reviewer": lab["annotator"].pk},
            selection=Selection(chain_ids=tuple(lab["ids"][:1])),
        )
    with pytest.raises(ValidationError, match="lead"):
        chains_reviewer_set(
            project=lab["project"], chain_ids=lab["ids"][:1], reviewer=lab["annotator"]
        )
    with pytest.raises(ValidationError, match="more"):
        bulk_action_preview(
            project=lab["project"],
            kind="requeue",
            params={"more": 51},
            selection=Selection(filters=ChainFilters()),
        )


def test_a_failure_in_a_later_batch_leaves_nothing_done(lab, monkeypatch) -> None:
    # Given: batches of two, and an action that fails on its third batch
    monkeypatch.setattr(bulk_actions, "BATCH_CHAINS", 2)
    real = bulk_actions.ACTIONS["reviewer"]
    calls = []

    def failing(**kwargs: Any) -> Any:
        calls.append(kwargs["chain_ids"])
        if len(calls) == 3:
            raise RuntimeError("the database went away")
        return real.apply(**kwargs)

    monkeypatch.setitem(
        bulk_actions.ACTIONS, "reviewer", bulk_actions._Action(real.reasons, failing)
    )

    # When: a reviewer is set on every chain
    job = bulk_run(lab, "reviewer", Selection(filters=ChainFilters()), reviewer=lab["lead"].pk)

    # Then: the first two batches' writes are gone with the third's failure
    assert len(calls) == 3
    assert job.status == BulkActionStatus.FAILED
    assert job.detail == "The action failed (RuntimeError); nothing was changed."
    assert not Chain.objects.filter(reviewer__isnull=False).exists()
    assert not ChainEvent.objects.exists()


def test_a_second_delivery_does_nothing(lab) -> None:
    job = bulk_run(lab, "unflag", Selection(chain_ids=tuple(lab["ids"][4:5])))
    before = list(ChainEvent.objects.values_list("pk", flat=True))

    bulk_action_execute(job_id=job.pk)
    bulk_action_execute(job_id=10**9)  # a job that is gone

    assert list(ChainEvent.objects.values_list("pk", flat=True)) == before


@pytest.mark.django_db(transaction=True)
def test_progress_reaches_the_row_while_the_action_runs(monkeypatch: Any) -> None:
    # Given: a committed job over five chains, batches of two, progress written at once
    monkeypatch.setattr(bulk_actions, "bulk_action_enqueue", lambda *, job_id: None)
    monkeypatch.setattr(bulk_actions, "BATCH_CHAINS", 2)
    monkeypatch.setattr(progress, "PROGRESS_INTERVAL_SECONDS", 0.0)
    project = ProjectFactory()
    lead = MembershipFactory(project=project, role=Role.LEAD).user
    ids = [ChainFactory(project=project, is_flagged=True).pk for _ in range(5)]
    job = bulk_action_create(
        project=project,
        user=lead,
        kind="unflag",
        params={},
        selection=Selection(chain_ids=tuple(ids)),
        expected=5,
    )
    seen: list[tuple[int, int]] = []
    observer = connections.create_connection("default")
    write = progress.RowProgress.write_now

    def write_and_look(self: Any, **columns: int) -> None:
        write(self, **columns)
        # What the page's poll sees of the row and of the chains, mid-transaction.
        with observer.cursor() as cursor:
            cursor.execute("SELECT done FROM annotation_bulkaction WHERE id = %s", [job.pk])
            done = cursor.fetchone()[0]
            cursor.execute("SELECT count(*) FROM annotation_chain WHERE is_flagged")
            seen.append((done, cursor.fetchone()[0]))

    monkeypatch.setattr(progress.RowProgress, "write_now", write_and_look)

    # When: the task's body runs
    try:
        bulk_action_execute(job_id=job.pk)
    finally:
        observer.close()

    # Then: the row moved batch by batch while every chain still read as flagged
    assert seen == [(2, 5), (4, 5), (5, 5)]
    job.refresh_from_db()
    assert (job.status, job.done, job.changed) == (BulkActionStatus.DONE, 5, 5)
    assert not Chain.objects.filter(is_flagged=True).exists()


# --------------------------------------------------------------------------- one chain


def test_the_single_chain_actions_record_their_history_too(lab) -> None:
    ids, lead = lab["ids"], lab["lead"]
    project = lab["project"]

    chain_requeue(chain=Chain.objects.get(pk=ids[2]), more=1, actor=lead)
    chain_flag_clear(chain=Chain.objects.select_related("project").get(pk=ids[4]), user=lead)
    gold_mark(project=project, chain_ids=[ids[7]], actor=lead)
    chains_reviewer_set(project=project, chain_ids=[ids[9]], reviewer=lead, actor=lead)

    events = ChainEvent.objects.order_by("id")
    assert [(e.chain_id, e.kind, e.actor_id, e.bulk_action_id) for e in events] == [
        (ids[2], ChainEventKind.REQUEUED, lead.pk, None),
        (ids[4], ChainEventKind.UNFLAGGED, lead.pk, None),
        (ids[7], ChainEventKind.GOLD_MARKED, lead.pk, None),
        (ids[9], ChainEventKind.REVIEWER, lead.pk, None),
    ]
    # What an action leaves is not recorded: a chain that was not flagged stays quiet.
    chain_flag_clear(chain=Chain.objects.select_related("project").get(pk=ids[10]), user=lead)
    assert ChainEvent.objects.count() == 4
