"""Dawid-Skene consensus: reliability learned from the labels and from gold, beside majority
vote; ties stay ties; a project's choice reaches consensus_for_chains, and so snapshots."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from annotation.datasets.snapshots import snapshot_create
from annotation.models import ConsensusFit, ConsensusMethod, ImportLabels, Snapshot
from annotation.quality.consensus import consensus_for_chains
from annotation.quality.consensus_fit import dawid_skene_fit
from annotation.quality.dawid_skene import dawid_skene_posteriors
from annotation.quality.gold import gold_mark
from annotation.quality.review_reads import chain_labels
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings

# 30 steps whose truth three careful annotators agree on.
TRUTH = [[1, 1, -1, 0, 1, -1][i % 6] for i in range(30)]
# Two careless annotators, each wrong on two steps of three, in different ways.
ULI = [t if i % 3 == 0 else {1: -1, -1: 0, 0: 1}[t] for i, t in enumerate(TRUTH)]
VIC = [t if i % 3 == 1 else {1: 0, 0: -1, -1: 1}[t] for i, t in enumerate(TRUTH)]
# The colluders of the gold tests: they swap +1 and -1, always together.
FLIP = {1: -1, -1: 1, 0: 0}


class Votes:
    """Build the pure function's arrays vote by vote."""

    def __init__(self) -> None:
        self.steps: list[int] = []
        self.workers: list[int] = []
        self.ratings: list[int] = []

    def add(self, step: int, worker: int, rating: int) -> None:
        self.steps.append(step)
        self.workers.append(worker)
        self.ratings.append(rating)

    def fit(self, workers: int, gold: dict[int, int] | None = None):
        posteriors = dawid_skene_posteriors(
            steps=np.array(self.steps),
            workers=np.array(self.workers),
            ratings=np.array(self.ratings),
            worker_count=workers,
            gold=gold,
        )
        at = {int(step): i for i, step in enumerate(posteriors.steps)}
        return posteriors, at


# --- the pure fit --------------------------------------------------------------------


def test_dawid_skene_follows_the_reliable_annotator_where_majority_ties_or_is_outvoted():
    # Given: ann, bob and cat (0-2) agree on 30 steps; uli (3) and vic (4) often err
    votes = Votes()
    for step, truth in enumerate(TRUTH):
        for worker in (0, 1, 2):
            votes.add(step, worker, truth)
        votes.add(step, 3, ULI[step])
        votes.add(step, 4, VIC[step])
    # Step 100: ann +1 against uli -1 (majority: a tie); step 101: ann +1 against uli and
    # vic -1 (majority: -1, two to one)
    votes.add(100, 0, 1)
    votes.add(100, 3, -1)
    for worker, rating in ((0, 1), (3, -1), (4, -1)):
        votes.add(101, worker, rating)

    # When
    posteriors, at = votes.fit(workers=5)

    # Then: ann's +1 wins both, with high posterior, and nobody calls them ties
    for step in (100, 101):
        assert posteriors.labels[at[step]] == 1
        assert posteriors.probability[at[step]] > 0.95
        assert not posteriors.tied[at[step]]
    # ...and the reliability says why
    assert posteriors.reliability[:3].min() > 0.95
    assert posteriors.reliability[3:].max() < 0.5
    # The agreed steps keep their truth
    assert [int(posteriors.labels[at[step]]) for step in range(30)] == TRUTH


def test_a_posterior_tie_is_a_tie_with_the_lowest_rating():
    # Given two voters, one step each way, and nothing to tell them apart
    votes = Votes()
    votes.add(1, 0, 1)
    votes.add(1, 1, -1)
    # When
    posteriors, at = votes.fit(workers=2)
    # Then: a tie, and the tie rule's pick is the lowest rating (as in majority vote)
    assert bool(posteriors.tied[at[1]])
    assert posteriors.labels[at[1]] == -1
    assert posteriors.probability[at[1]] == pytest.approx(0.5)


def test_gold_answer_keys_unmask_annotators_who_agree_on_the_wrong_label():
    # Given: pat (0) tells the truth; quin and rae (1, 2) swap +1 and -1 together, so the
    # labels alone make them look like the reliable pair; steps 0-19 are a gold chain
    truth = [[1, -1, 1, 1, -1][i % 5] for i in range(20)]
    votes = Votes()
    for offset in (0, 50):  # the gold steps, then 20 ordinary steps like them
        for i, rating in enumerate(truth):
            votes.add(offset + i, 0, rating)
            votes.add(offset + i, 1, FLIP[rating])
            votes.add(offset + i, 2, FLIP[rating])
    for worker, rating in ((0, 1), (1, -1), (2, -1)):
        votes.add(100, worker, rating)

    # When: fitted without gold, then with the gold chain's answer key
    blind, at = votes.fit(workers=3)
    informed, at_informed = votes.fit(workers=3, gold=dict(enumerate(truth)))

    # Then: without gold the pair wins step 100; with it, pat does
    assert blind.labels[at[100]] == -1
    assert informed.labels[at_informed[100]] == 1
    assert informed.probability[at_informed[100]] > 0.95
    assert informed.reliability[0] > 0.95 and informed.reliability[1:].max() < 0.05
    # The ordinary steps follow pat too
    assert [int(informed.labels[at_informed[50 + i]]) for i in range(20)] == truth


def test_no_votes_fit_nothing():
    posteriors, _ = Votes().fit(workers=0)
    assert posteriors.steps.size == 0 and posteriors.iterations == 0


def test_the_fit_at_100000_votes_beats_majority():
    # Given 100,000 votes: 33,334 steps, three of 30 annotators each, accuracy 55-95 %
    rng = np.random.default_rng(0)
    steps = 33_334
    truth = rng.choice([-1, 0, 1], size=steps, p=[0.2, 0.1, 0.7])
    tasks = np.repeat(np.arange(steps), 3)
    workers = np.concatenate([rng.choice(30, 3, replace=False) for _ in range(steps)])
    right = rng.random(tasks.size) < np.linspace(0.55, 0.95, 30)[workers]
    ratings = np.where(right, truth[tasks], rng.choice([-1, 0, 1], size=tasks.size))
    # When (its time is a benchmark's to measure, not a test's: about 1.2 s on 2 cores)
    posteriors = dawid_skene_posteriors(
        steps=tasks, workers=workers, ratings=ratings, worker_count=30
    )
    # Then: it beats majority vote's accuracy
    majority_right = np.mean(
        [
            np.bincount(ratings[i * 3 : i * 3 + 3] + 1, minlength=3).argmax() - 1 == truth[i]
            for i in range(steps)
        ]
    )
    accuracy = float(np.mean(posteriors.labels == truth[posteriors.steps]))
    assert accuracy > majority_right


# --- from the database ----------------------------------------------------------------


def _people(*names: str):
    return {name: UserFactory(username=f"{name}-ds") for name in names}


def calibrated_project(project):
    """A project where ann, bob and cat agree on a 30-step chain and uli and vic err, and
    a target chain: step 0 ann +1 vs uli -1, step 1 ann +1 vs uli and vic -1."""
    people = _people("ann", "bob", "cat", "uli", "vic")
    calibration = ChainFactory(project=project, step_count=30)
    for name in ("ann", "bob", "cat"):
        annotation_with_ratings(chain=calibration, annotator=people[name], labels=TRUTH)
    annotation_with_ratings(chain=calibration, annotator=people["uli"], labels=ULI)
    annotation_with_ratings(chain=calibration, annotator=people["vic"], labels=VIC)
    target = ChainFactory(project=project, step_count=2)
    annotation_with_ratings(chain=target, annotator=people["ann"], labels=[1, 1])
    annotation_with_ratings(chain=target, annotator=people["uli"], labels=[-1, -1])
    annotation_with_ratings(chain=target, annotator=people["vic"], labels=[None, -1])
    return people, calibration, target


@pytest.mark.django_db
def test_consensus_for_chains_honours_the_projects_method(project, django_assert_num_queries):
    _, calibration, target = calibrated_project(project)
    counts = {target.pk: 2, calibration.pk: 30}

    # Majority (the default): a tie on step 0, outvoted on step 1; two queries (the
    # project, looked up from the chains, and the votes)
    with django_assert_num_queries(2):
        majority = consensus_for_chains(
            chain_step_counts=counts, import_labels=project.import_labels
        )
    assert majority[target.pk].labels == [-1, -1]
    assert majority[target.pk].tied == [True, False]

    # Dawid-Skene: ann's +1 on both, the posterior as support, no tie
    project.consensus = ConsensusMethod.DAWID_SKENE
    project.save(update_fields=["consensus"])
    learned = consensus_for_chains(chain_step_counts=counts, import_labels=project.import_labels)
    assert learned[target.pk].labels == [1, 1]
    assert learned[target.pk].tied == [False, False]
    assert all(share > 0.95 for share in learned[target.pk].support)
    assert learned[calibration.pk].labels == TRUTH

    # Cached: a second call reads the fit's key (two queries) besides the votes
    with django_assert_num_queries(3):
        consensus_for_chains(
            chain_step_counts=counts, import_labels=project.import_labels, project=project
        )


@pytest.mark.django_db
def test_an_adjudication_still_wins_under_dawid_skene(project, make_member):
    from annotation.quality.review import AdjudicatedRating, adjudication_create

    project.consensus = ConsensusMethod.DAWID_SKENE
    project.save(update_fields=["consensus"])
    _, _, target = calibrated_project(project)
    step = target.steps.get(index=0)
    adjudication_create(
        chain=target,
        lead=make_member(project, "lead"),
        ratings=[AdjudicatedRating(step_id=step.pk, rating=0)],
        note="",
    )
    result = consensus_for_chains(chain_step_counts={target.pk: 2}, import_labels="fallback")
    assert result[target.pk].labels == [0, 1]
    assert result[target.pk].support[0] == 1.0


@pytest.mark.django_db
def test_a_new_vote_refits(project, make_member):
    project.consensus = ConsensusMethod.DAWID_SKENE
    project.save(update_fields=["consensus"])
    people, _, target = calibrated_project(project)
    before = dawid_skene_fit(project=project)
    assert before.votes == 5 * 30 + 5
    annotation_with_ratings(chain=target, annotator=people["bob"], labels=[1, 1])
    after = dawid_skene_fit(project=project)
    assert after.votes == before.votes + 2
    assert dawid_skene_fit(project=project) is after  # the same fit, from this process
    # A lead's ruling is no vote: the fit stands
    from annotation.quality.review import AdjudicatedRating, adjudication_create

    adjudication_create(
        chain=target,
        lead=make_member(project, "lead"),
        ratings=[AdjudicatedRating(step_id=target.steps.get(index=0).pk, rating=1)],
        note="",
    )
    assert dawid_skene_fit(project=project) is after


@pytest.mark.django_db
def test_gold_chains_teach_dawid_skene_who_to_trust(project):
    # Given pat truthful, quin and rae swapping +1/-1 together, on an ordinary chain and a
    # target step (pat +1, quin and rae -1)
    project.consensus = ConsensusMethod.DAWID_SKENE
    project.import_labels = ImportLabels.FALLBACK
    project.save(update_fields=["consensus", "import_labels"])
    people = _people("pat", "quin", "rae")
    truth = [[1, -1, 1, 1, -1][i % 5] for i in range(20)]

    def labeled_chain(steps: list[int], *, pat: list[int]):
        chain = ChainFactory(project=project, step_count=len(steps))
        annotation_with_ratings(chain=chain, annotator=people["pat"], labels=pat)
        for name in ("quin", "rae"):
            annotation_with_ratings(
                chain=chain, annotator=people[name], labels=[FLIP[r] for r in pat]
            )
        return chain

    ordinary = labeled_chain(truth, pat=truth)
    target = labeled_chain([1], pat=[1])
    gold = labeled_chain(truth, pat=truth)
    annotation_with_ratings(chain=gold, labels=truth)  # the import that is its answer key
    counts = {ordinary.pk: 20, target.pk: 1}

    # When: before the chain is gold, the pair wins; after, pat does
    blind = consensus_for_chains(chain_step_counts=counts, import_labels="fallback")
    gold_mark(project=project, chain_ids=[gold.pk])
    informed = consensus_for_chains(chain_step_counts=counts, import_labels="fallback")

    # Then
    assert blind[target.pk].labels == [-1]
    assert informed[target.pk].labels == [1]
    assert informed[ordinary.pk].labels == truth
    fit = dawid_skene_fit(project=project)
    assert fit.gold_steps == 20
    assert fit.reliability[people["pat"].username] > 0.95


@pytest.mark.django_db
def test_snapshots_use_the_projects_method(project):
    _, calibration, target = calibrated_project(project)
    for chain in (calibration, target):
        chain.is_finished = True
        chain.finished_count = 3
        chain.save(update_fields=["is_finished", "finished_count"])

    def target_row(snapshot: Snapshot):
        return snapshot.chains.get(chain=target)

    majority = snapshot_create(project=project, ties="lowest")
    project.consensus = ConsensusMethod.DAWID_SKENE
    project.save(update_fields=["consensus"])
    learned = snapshot_create(project=project, ties="lowest")

    assert target_row(majority).labels == [-1, -1]
    assert target_row(learned).labels == [1, 1]
    assert majority.meta["consensus"]["method"] == "majority"
    assert learned.meta["consensus"]["method"] == "dawid_skene"
    assert all(share > 0.95 for share in target_row(learned).support)


@pytest.mark.django_db
def test_a_snapshot_fits_once_though_votes_arrive_between_its_chunks(project, monkeypatch):
    from annotation.datasets import snapshots
    from annotation.quality import consensus_fit

    # Given a Dawid-Skene project of finished chains, read one chunk (chain) at a time
    people, calibration, target = calibrated_project(project)
    for chain in (calibration, target):
        chain.is_finished, chain.finished_count = True, 3
        chain.save(update_fields=["is_finished", "finished_count"])
    project.consensus = ConsensusMethod.DAWID_SKENE
    project.save(update_fields=["consensus"])
    monkeypatch.setattr(snapshots, "CHUNK_CHAINS", 1)
    fits: list[int] = []
    real_fit = consensus_fit._fit
    monkeypatch.setattr(consensus_fit, "_fit", lambda **kw: fits.append(1) or real_fit(**kw))
    # ...and a vote that lands while the first chunk is written
    real_rows = snapshots.chunk_rows
    late = ChainFactory(project=project, step_count=2)

    def rows_then_a_vote(**kwargs):
        rows = real_rows(**kwargs)
        if not late.annotations.exists():
            annotation_with_ratings(chain=late, annotator=people["bob"], labels=[1, 1])
        return rows

    monkeypatch.setattr(snapshots, "chunk_rows", rows_then_a_vote)

    # When the snapshot is taken
    snapshot_create(project=project, ties="lowest")

    # Then the project was fitted once, for every chunk alike
    assert fits == [1]
    # And the database holds one fit per project and import-labels rule, replaced (not
    # added to) on a refit: the snapshot read people's labels only (its default), the
    # project's own fit reads them by the project's rule
    dawid_skene_fit(project=project)
    dawid_skene_fit(project=project)
    assert fits == [1, 1]
    stored = ConsensusFit.objects.get(project=project, import_labels=project.import_labels)
    assert stored.stamp == consensus_fit._fit_stamp(
        project=project, import_labels=project.import_labels
    )


@pytest.mark.django_db
def test_chain_labels_show_both_methods_side_by_side(project):
    people, _, target = calibrated_project(project)
    # A majority-vote project is never fitted for the comparison
    unfitted = chain_labels(chain=target)
    assert [step.dawid_skene for step in unfitted.steps] == [None, None]
    assert unfitted.reliability == {}
    assert not ConsensusFit.objects.exists()
    # Once a fit of its current labels is stored, it is shown beside majority vote
    dawid_skene_fit(project=project)
    labels = chain_labels(chain=target)
    first, second = labels.steps
    assert labels.method == ConsensusMethod.MAJORITY
    # Majority: a tie on step 1, outvoted on step 2; the consensus follows majority
    assert (first.majority, first.majority_tied, first.tied) == (-1, True, True)
    assert (second.majority, second.majority_tied) == (-1, False)
    assert second.majority_support == pytest.approx(2 / 3)
    # Dawid-Skene beside it: ann's +1 with its posterior
    assert first.dawid_skene is not None and second.dawid_skene is not None
    assert (first.dawid_skene.label, first.dawid_skene.tied) == (1, False)
    assert second.dawid_skene.label == 1 and second.dawid_skene.probability > 0.95
    assert labels.reliability[people["ann"].username] > 0.95
    assert labels.reliability[people["uli"].username] < 0.5
    assert people["bob"].username not in labels.reliability  # not a voter on this chain


PROBE = r"""
import sys
import numpy as np
import annotation.quality.dawid_skene as ds
loaded_early = "crowdkit" in sys.modules
ds.dawid_skene_posteriors(
    steps=np.array([1, 1]), workers=np.array([0, 1]), ratings=np.array([1, -1]), worker_count=2
)
print(loaded_early, "crowdkit" in sys.modules, "torch" in sys.modules,
      "transformers" in sys.modules)
"""


def test_crowd_kit_loads_only_to_fit_and_never_brings_torch():
    # Given a fresh interpreter; when it imports the module and then fits
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Then crowd-kit was not loaded by the import, was by the fit, and torch and
    # transformers never were (the web process fits on the review page)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "False", "False"]
