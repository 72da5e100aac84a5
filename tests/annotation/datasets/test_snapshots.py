"""Snapshots: counts, versions, content hash, immutability, the problem-level split, the
lead's options (finished chains only, minimum support, tie policy, split seed), and
streaming their examples."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from annotation.datasets.snapshot_reads import (
    snapshot_examples,
    snapshot_get,
    snapshot_list,
    snapshot_options,
)
from annotation.datasets.snapshot_rows import problem_split
from annotation.datasets.snapshots import snapshot_create
from annotation.models import ImportLabels, Snapshot, SnapshotChain
from annotation.quality.gold import gold_mark
from annotation.quality.review import AdjudicatedRating, adjudication_create
from tests.factories import (
    ChainFactory,
    ProblemFactory,
    ProjectFactory,
    UserFactory,
    annotation_with_ratings,
)

pytestmark = pytest.mark.django_db


def _labeled_chain(project, labels, *, annotator=None, problem=None, finished=True):
    """A chain with one person's labels; ``finished`` as the queue leaves a chain of an
    overlap-1 project after its one pass (the factory writes around the queue)."""
    chain = ChainFactory(
        project=project,
        step_count=len(labels),
        finished_count=int(finished),
        is_finished=finished,
        **({"problem": problem} if problem else {}),
    )
    annotation_with_ratings(chain=chain, annotator=annotator or UserFactory(), labels=labels)
    return chain


def _voted_chain(project, *votes, finished=True):
    """A chain of ``len(votes[0])`` steps with one person's labels per entry of ``votes``."""
    chain = ChainFactory(
        project=project,
        step_count=len(votes[0]),
        finished_count=len(votes) if finished else 0,
        is_finished=finished,
    )
    for labels in votes:
        annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=list(labels))
    return chain


def _row(snapshot, chain):
    return SnapshotChain.objects.get(snapshot=snapshot, chain=chain)


def test_snapshot_create_counts_and_rows(project):
    # Given two labeled chains, one partly labeled, and an unlabeled one
    lead = UserFactory()
    full = _labeled_chain(project, [1, 0, -1])
    partial = _labeled_chain(project, [1, -1, None])
    ChainFactory(project=project)

    # When
    snapshot = snapshot_create(project=project, user=lead, heldout_fraction=0.0)

    # Then
    assert snapshot.version == 1
    assert snapshot.created_by == lead
    assert snapshot.counts == {
        "chains": 2,
        "steps_labeled": 5,
        "train_chains": 2,
        "heldout_chains": 0,
        "problems": 2,
        "label_counts": {"-1": 2, "0": 1, "1": 2},
        "tied_steps": 0,
        "steps_below_support": 0,
        "unfinished_left_out": 0,
        "sources": {"human": 2, "import": 0},
        "imported_left_out": 0,
    }
    assert snapshot.meta["sources"] == ["human"]
    assert snapshot.meta["options"] == {
        "finished_only": True,
        "include_imported": False,
        "min_support": 1,
        "ties": "drop",
        "heldout_fraction": 0.0,
        "seed": 0,
        "machine_sources": [],
    }
    assert snapshot.meta["trl_ambiguous"] == "drop"
    # People's labels only: no import's label counts, whatever the project's rule.
    assert snapshot.meta["consensus"]["import_labels"] == "ignore"
    rows = {row.chain_id: row for row in SnapshotChain.objects.filter(snapshot=snapshot)}
    assert set(rows) == {full.pk, partial.pk}
    assert rows[partial.pk].labels == [1, -1, None]
    assert rows[partial.pk].support == [1.0, 1.0, None]
    assert rows[full.pk].votes[0]["labels"] == [1, 0, -1]
    assert len(snapshot.content_hash) == 64


def test_snapshot_without_new_labels_has_same_hash_and_next_version(project):
    # Given a snapshot
    chain = _labeled_chain(project, [1, 1, 1])
    first = snapshot_create(project=project)

    # When a second one is taken with nothing new
    second = snapshot_create(project=project)

    # Then it is a new version with the same content hash
    assert (first.version, second.version) == (1, 2)
    assert second.content_hash == first.content_hash

    # And when a new label changes the consensus, the next hash differs
    annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[1, 1, -1])
    third = snapshot_create(project=project)
    assert third.version == 3
    assert third.content_hash != first.content_hash


def test_training_runs_number_their_snapshots_apart_from_the_datasets(project):
    # Given a dataset, then two training runs' own snapshots
    _labeled_chain(project, [1, 1, 1])
    first = snapshot_create(project=project)
    trained = [snapshot_create(project=project, training_run=run) for run in (7, 8)]

    # When the lead takes the next dataset
    second = snapshot_create(project=project)

    # Then the datasets read v1, v2 with no gap, and the training runs' t1, t2
    assert [(s.kind, s.version, s.label) for s in (first, second)] == [
        ("dataset", 1, "v1"),
        ("dataset", 2, "v2"),
    ]
    assert [(s.kind, s.version, s.label) for s in trained] == [
        ("training", 1, "t1"),
        ("training", 2, "t2"),
    ]
    assert [s.meta["training_run"] for s in trained] == [7, 8]


def test_snapshot_rows_do_not_change_when_labels_change_later(project):
    # Given a snapshot of one chain
    chain = _labeled_chain(project, [1, 1, 1])
    snapshot = snapshot_create(project=project)

    # When two more annotators disagree afterwards
    for _ in range(2):
        annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=[-1, -1, -1])
    newer = snapshot_create(project=project)

    # Then the old snapshot still holds what it froze
    old_row = SnapshotChain.objects.get(snapshot=snapshot)
    assert old_row.labels == [1, 1, 1]
    assert SnapshotChain.objects.get(snapshot=newer).labels == [-1, -1, -1]


def test_snapshot_hash_does_not_depend_on_ids_or_voters(project):
    # Given the same labels from different people, in another project, made in reverse order
    from tests.factories import ProjectFactory

    other = ProjectFactory()
    specs = [("What is 1+1?", [1, -1]), ("What is 2+2?", [1, 1]), ("What is 3+3?", [0, 1])]
    for target, order in ((project, specs), (other, list(reversed(specs)))):
        for text, labels in order:
            problem = ProblemFactory(project=target, text=text, content_hash=f"p-{text}")
            chain = ChainFactory(
                project=target,
                problem=problem,
                step_count=2,
                content_hash=f"c-{text}",
                finished_count=1,
                is_finished=True,
            )
            annotation_with_ratings(chain=chain, annotator=UserFactory(), labels=labels)

    # When
    ours = snapshot_create(project=project, seed=3, heldout_fraction=0.5)
    theirs = snapshot_create(project=other, seed=3, heldout_fraction=0.5)

    # Then
    assert ours.content_hash == theirs.content_hash
    assert snapshot_create(project=project, seed=4, heldout_fraction=0.5).counts["chains"] == 3


def test_split_is_by_problem_and_deterministic(project):
    # Given 40 problems with 3 labeled chains each
    for _ in range(40):
        problem = ProblemFactory(project=project)
        for _ in range(3):
            _labeled_chain(project, [1, -1], problem=problem)

    # When
    snapshot = snapshot_create(project=project, heldout_fraction=0.3, seed=7)
    again = snapshot_create(project=project, heldout_fraction=0.3, seed=7)
    reseeded = snapshot_create(project=project, heldout_fraction=0.3, seed=8)

    # Then the seed and the share are the snapshot's options
    assert snapshot_options(snapshot=snapshot)["seed"] == 7
    assert snapshot_options(snapshot=snapshot)["heldout_fraction"] == 0.3
    assert snapshot_options(snapshot=reseeded)["seed"] == 8

    # ...no problem is in both splits, both splits are used, and the split is stable
    def splits(snap):
        return set(
            SnapshotChain.objects.filter(snapshot=snap).values_list("chain__problem_id", "split")
        )

    by_problem: dict[int, set[str]] = {}
    for problem_id, split in splits(snapshot):
        by_problem.setdefault(problem_id, set()).add(split)
    assert all(len(found) == 1 for found in by_problem.values())
    heldout = sum(found == {"heldout"} for found in by_problem.values())
    assert 0 < heldout < 40
    assert snapshot.counts["heldout_chains"] == 3 * heldout
    assert splits(again) == splits(snapshot)
    assert again.content_hash == snapshot.content_hash
    assert splits(reseeded) != splits(snapshot)


def test_problem_split_fraction_is_roughly_honoured():
    heldout = sum(
        problem_split(problem_hash=f"{i:064x}", seed=0, heldout_fraction=0.2) == "heldout"
        for i in range(5000)
    )
    assert 800 < heldout < 1200


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_snapshot_create_rejects_bad_fraction(project, fraction):
    _labeled_chain(project, [1])
    with pytest.raises(ValidationError):
        snapshot_create(project=project, heldout_fraction=fraction)


def test_snapshot_create_refuses_a_project_without_labels(project):
    ChainFactory(project=project)
    with pytest.raises(ValidationError, match="no labeled step"):
        snapshot_create(project=project)
    assert not snapshot_list(project=project).exists()


def test_snapshot_examples_streams_chunks_with_steps_in_order(project, django_assert_num_queries):
    # Given 5 labeled chains
    chains = [_labeled_chain(project, [1, 1, -1]) for _ in range(5)]
    snapshot = snapshot_create(project=project, heldout_fraction=0.0)

    # When read two at a time: 3 chunks of 2 queries, and one query that finds the end
    with django_assert_num_queries(7):
        examples = list(snapshot_examples(snapshot=snapshot, chunk_size=2))

    # Then every chain comes once, with its problem and ordered steps
    assert sorted(example.chain_id for example in examples) == sorted(c.pk for c in chains)
    first = examples[0]
    chain = next(c for c in chains if c.pk == first.chain_id)
    assert first.problem == chain.problem.text
    assert first.steps == ["Step 1.", "Step 2.", "Step 3."]
    assert first.labels == [1, 1, -1]
    assert first.votes == []
    assert list(snapshot_examples(snapshot=snapshot, split="heldout")) == []
    assert snapshot_get(project=project) == snapshot
    assert snapshot_get(project=project, version=9) is None


# --- the options -----------------------------------------------------------------------------


def test_finished_only_is_the_default_and_says_what_it_left_out():
    # Given: overlap 2, and chains in every state of a labeling
    project = ProjectFactory(overlap=2)
    lead = UserFactory()
    finished = _voted_chain(project, [1, 1], [1, 1])
    half_done = _voted_chain(project, [1, -1], finished=False)
    ruled = _voted_chain(project, [1, 1], finished=False)
    adjudication_create(
        chain=ruled,
        lead=lead,
        ratings=[AdjudicatedRating(step_id=s.pk, rating=-1) for s in ruled.steps.all()],
    )
    imported = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=imported, labels=[1, -1])
    imported_then_started = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=imported_then_started, labels=[1, 1])
    annotation_with_ratings(chain=imported_then_started, annotator=UserFactory(), labels=[-1, 1])
    gold = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=gold, labels=[1, 1])
    gold_mark(project=project, chain_ids=[gold.pk])
    flagged = _voted_chain(project, [1, 1], [1, 1])
    flagged.is_flagged = True
    flagged.save(update_fields=["is_flagged"])
    ChainFactory(project=project)  # unlabeled

    # When: a snapshot with the defaults, one with imported labels, one of every chain
    default = snapshot_create(project=project, user=lead)
    with_imported = snapshot_create(project=project, user=lead, include_imported=True)
    everything = snapshot_create(
        project=project, user=lead, finished_only=False, include_imported=True
    )

    # Then: the default keeps the chains people finished, and counts the rest apart;
    # only the snapshot that includes imported labels lets an import finish a chain
    def kept(snapshot):
        return set(
            SnapshotChain.objects.filter(snapshot=snapshot).values_list("chain_id", flat=True)
        )

    assert kept(default) == {finished.pk, ruled.pk}
    assert default.counts["unfinished_left_out"] == 3  # half done, started, flagged
    assert default.counts["imported_left_out"] == 2  # imported, gold (an imported key)
    assert default.counts["sources"] == {"human": 2, "import": 0}
    assert default.meta["options"]["finished_only"] is True
    assert "overlap" in default.meta["finished"]
    assert "import" not in default.meta["finished"]
    assert kept(with_imported) == {finished.pk, ruled.pk, imported.pk, gold.pk}
    assert with_imported.counts["sources"] == {"human": 2, "import": 2}
    assert with_imported.counts["imported_left_out"] == 0
    assert with_imported.meta["sources"] == ["human", "import"]
    assert everything.counts["chains"] == 7
    assert everything.counts["unfinished_left_out"] == 0
    assert everything.meta["options"]["finished_only"] is False
    assert "finished" not in everything.meta
    assert half_done.pk in kept(everything)


@pytest.mark.parametrize("rule", [ImportLabels.IGNORE, ImportLabels.FALLBACK, ImportLabels.VOTE])
def test_imported_labels_enter_a_snapshot_only_when_the_lead_includes_them(rule):
    # Given: a chain only an import labeled, and one a person labeled over an import's
    project = ProjectFactory(import_labels=rule)
    imported = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=imported, labels=[1, -1])
    both = _labeled_chain(project, [1, 1])
    annotation_with_ratings(chain=both, labels=[-1, -1])

    # When: the default snapshot, and one with imported labels
    people = snapshot_create(project=project, finished_only=False)
    imports = snapshot_create(
        project=project, finished_only=False, include_imported=True, ties="lowest"
    )

    # Then: the people's snapshot holds people's labels only, whatever the project's rule
    assert people.counts["chains"] == 1
    assert people.counts["imported_left_out"] == 1
    assert _row(people, both).labels == [1, 1]
    assert [vote["source"] for vote in _row(people, both).votes] == ["human"]
    # and with them, imported labels count by the project's rule ("ignore": fallback)
    assert imports.counts["chains"] == 2
    assert _row(imports, imported).labels == [1, -1]
    voted = rule == ImportLabels.VOTE
    assert _row(imports, both).labels == ([-1, -1] if voted else [1, 1])  # a tie: lowest
    assert imports.counts["sources"] == {"human": 1, "import": 2 if voted else 1}
    assert imports.meta["consensus"]["import_labels"] == (
        ImportLabels.FALLBACK if rule == ImportLabels.IGNORE else rule
    )


def test_a_people_only_snapshot_of_imported_labels_says_how_to_include_them():
    project = ProjectFactory()
    annotation_with_ratings(chain=ChainFactory(project=project, step_count=2), labels=[1, 1])
    with pytest.raises(ValidationError, match="1 chains have labels from an import only"):
        snapshot_create(project=project)
    assert snapshot_create(project=project, include_imported=True).counts["chains"] == 1


def test_finished_only_with_nothing_finished_says_how_to_include_the_rest(project):
    _labeled_chain(project, [1, 1], finished=False)
    with pytest.raises(ValidationError, match="1 labeled chains are unfinished"):
        snapshot_create(project=project)
    assert snapshot_create(project=project, finished_only=False).counts["chains"] == 1


def test_min_support_leaves_steps_with_fewer_votes_unlabeled():
    # Given: three annotators; step 1 has 3 votes, step 2 has 2, step 3 has 1
    project = ProjectFactory(overlap=3)
    chain = _voted_chain(project, [1, 1, -1], [1, 1, None], [1, None, None])

    # When / Then: each minimum drops the steps below it
    one = snapshot_create(project=project)
    assert _row(one, chain).labels == [1, 1, -1]
    two = snapshot_create(project=project, min_support=2)
    assert _row(two, chain).labels == [1, 1, None]
    assert _row(two, chain).support == [1.0, 1.0, None]
    assert two.counts["steps_below_support"] == 1
    assert two.counts["steps_labeled"] == 2
    three = snapshot_create(project=project, min_support=3)
    assert _row(three, chain).labels == [1, None, None]
    assert three.meta["options"]["min_support"] == 3
    assert len({one.content_hash, two.content_hash, three.content_hash}) == 3

    # ...and a chain with no step left is not in the snapshot at all
    with pytest.raises(ValidationError, match="minimum support"):
        snapshot_create(project=project, min_support=4)


def test_a_lead_s_ruling_settles_a_step_whatever_the_minimum():
    project = ProjectFactory(overlap=3)
    chain = _voted_chain(project, [1, 1], [1, None], finished=False)
    adjudication_create(
        chain=chain,
        lead=UserFactory(),
        ratings=[AdjudicatedRating(step_id=chain.steps.get(index=1).pk, rating=-1)],
    )

    snapshot = snapshot_create(project=project, min_support=2)

    assert _row(snapshot, chain).labels == [1, -1]
    assert snapshot.counts["steps_below_support"] == 0


def _tied_project():
    """Two annotators who split 1-1 on step 2 of one chain and agree on another."""
    project = ProjectFactory(overlap=2)
    tied = _voted_chain(project, [1, 1, 1], [1, -1, 1])
    calm = _voted_chain(project, [1, 1], [1, 1])
    return project, tied, calm


def test_tied_steps_are_dropped_by_default():
    project, tied, calm = _tied_project()

    snapshot = snapshot_create(project=project)

    row = _row(snapshot, tied)
    assert row.labels == [1, None, 1]
    assert row.support == [1.0, None, 1.0]
    assert row.tied == []
    assert _row(snapshot, calm).labels == [1, 1]
    assert snapshot.counts["tied_steps"] == 1
    assert snapshot.counts["steps_labeled"] == 4
    assert snapshot.meta["options"]["ties"] == "drop"
    assert snapshot.meta["consensus"]["tie"] == "tied steps are left unlabeled"


def test_tied_steps_keep_the_lowest_rating_or_are_marked():
    project, tied, _ = _tied_project()

    lowest = snapshot_create(project=project, ties="lowest")
    marked = snapshot_create(project=project, ties="mark")

    assert _row(lowest, tied).labels == [1, -1, 1]
    assert _row(lowest, tied).support == [1.0, 0.5, 1.0]
    assert _row(lowest, tied).tied == []
    assert _row(marked, tied).labels == [1, -1, 1]
    assert _row(marked, tied).tied == [1]
    assert lowest.counts["tied_steps"] == marked.counts["tied_steps"] == 1
    assert lowest.counts["steps_labeled"] == 5
    # The marks are part of what the snapshot holds
    assert lowest.content_hash != marked.content_hash
    assert marked.meta["consensus"]["tie"].startswith("lowest rating, the step listed")


def test_a_ruling_on_a_tied_step_is_no_longer_a_tie():
    project, tied, _ = _tied_project()
    adjudication_create(
        chain=tied,
        lead=UserFactory(),
        ratings=[AdjudicatedRating(step_id=tied.steps.get(index=1).pk, rating=1)],
    )

    snapshot = snapshot_create(project=project)

    assert _row(snapshot, tied).labels == [1, 1, 1]
    assert snapshot.counts["tied_steps"] == 0


def test_the_split_options_are_recorded_and_reproduce_the_split(project):
    for _ in range(20):
        _labeled_chain(project, [1, -1])

    first = snapshot_create(project=project, heldout_fraction=0.5, seed=11)
    again = snapshot_create(project=project, **_split_of(first))
    none_held_out = snapshot_create(project=project, heldout_fraction=0.0, seed=11)

    assert first.seed == 11 and first.heldout_fraction == 0.5
    assert again.content_hash == first.content_hash
    assert none_held_out.counts["heldout_chains"] == 0
    assert 0 < first.counts["heldout_chains"] < 20


def _split_of(snapshot):
    options = snapshot_options(snapshot=snapshot)
    return {"heldout_fraction": options["heldout_fraction"], "seed": options["seed"]}


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"ties": "coin"}, "ties"),
        ({"min_support": 0}, "min_support"),
        ({"min_support": 51}, "min_support"),
    ],
)
def test_snapshot_create_rejects_bad_options(project, options, field):
    _labeled_chain(project, [1])
    with pytest.raises(ValidationError) as raised:
        snapshot_create(project=project, **options)
    assert field in raised.value.message_dict
    assert not snapshot_list(project=project).exists()


def test_a_snapshot_older_than_the_options_says_what_it_holds(project):
    old = Snapshot.objects.create(
        project=project, version=1, content_hash="x", heldout_fraction=0.1, seed=4
    )
    assert snapshot_options(snapshot=old) == {
        "finished_only": False,
        "include_imported": True,
        "min_support": 1,
        "ties": "lowest",
        "heldout_fraction": 0.1,
        "seed": 4,
        "machine_sources": [],
    }


def test_a_training_run_s_snapshot_and_the_dataset_list_apart(project):
    _labeled_chain(project, [1, 1])
    _labeled_chain(project, [1, -1], finished=False)
    dataset = snapshot_create(project=project)
    trained = snapshot_create(project=project, finished_only=False, ties="lowest", training_run=3)

    assert list(snapshot_list(project=project, kind="dataset")) == [dataset]
    assert list(snapshot_list(project=project, kind="training")) == [trained]
    assert list(snapshot_list(project=project)) == [trained, dataset]
    assert trained.counts["chains"] == 2 and dataset.counts["chains"] == 1
