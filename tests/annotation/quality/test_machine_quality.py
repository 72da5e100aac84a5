"""Each machine source measured against people and gold (issue 23, item 8)."""

from __future__ import annotations

import numpy as np
import pytest

from annotation.models import Chain, Role
from annotation.quality.machine_quality import cohen_kappa, machine_source_quality
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings, machine_labels

pytestmark = pytest.mark.django_db


def _people(chain: Chain, labels: list[int | None], *voters) -> None:
    for voter in voters:
        annotation_with_ratings(chain=chain, labels=labels, annotator=voter)


def test_a_source_is_measured_against_the_human_consensus_and_gold(project):
    # Given: four chains people agree on, a judge that agrees on three and calls the
    # fourth's first step wrong, and an imported answer key making the fourth gold
    ann, other = UserFactory(), UserFactory()
    chains = [ChainFactory(project=project, step_count=3) for _ in range(4)]
    people = [[1, 1, 1], [1, -1, None], [-1, None, None], [1, 1, -1]]
    judge = [[1, 1, 1], [1, -1, None], [-1, None, None], [-1, None, None]]
    for chain, human, machine in zip(chains, people, judge, strict=True):
        _people(chain, human, ann, other)
        machine_labels(chain=chain, ratings=machine, source="judge", run_kind="judge")
    key = annotation_with_ratings(chain=chains[3], labels=[1, 1, -1])
    Chain.objects.filter(pk=chains[3].pk).update(is_gold=True, gold_annotation=key)
    # ...and an import's labels that disagree with everything, which must not count
    annotation_with_ratings(chain=chains[0], labels=[-1, None, None])

    # When
    (quality,) = machine_source_quality(project=project)

    # Then: against people, the steps both rate in a confusion matrix and its kappa
    consensus, gold = quality.against
    assert (quality.source, quality.chains_labeled) == ("judge", 4)
    assert (consensus.reference, consensus.chains, consensus.steps) == ("consensus", 4, 7)
    #            machine: -1  0  1        (reference rows -1, 0, 1)
    assert consensus.confusion == [[2, 0, 0], [0, 0, 0], [1, 0, 4]]
    assert consensus.kappa == pytest.approx(cohen_kappa(np.array([[2, 0], [1, 4]])))
    assert (consensus.first_error.hits, consensus.first_error.total) == (3, 4)
    assert consensus.first_error.low < 0.75 < consensus.first_error.high
    assert consensus.kappa_low is not None and consensus.kappa_high is not None
    assert -1.0 <= consensus.kappa_low <= consensus.kappa_high <= 1.0
    # And against gold, the one gold chain
    assert (gold.chains, gold.steps, gold.first_error.hits, gold.first_error.total) == (
        1,
        1,
        0,
        1,
    )


def test_a_tied_step_is_no_verdict_of_people(project):
    chain = ChainFactory(project=project, step_count=2)
    _people(chain, [1, 1], UserFactory())
    _people(chain, [1, -1], UserFactory())
    machine_labels(chain=chain, ratings=[1, 1], source="monte_carlo")

    (quality,) = machine_source_quality(project=project)

    consensus = quality.against[0]
    assert consensus.steps == 1  # step 1's votes tie
    assert consensus.first_error.total == 0  # the tie leaves people's first error unknown


def test_a_verdict_routing_would_not_act_on_is_not_compared(project):
    # Given three chains people agree have no error, a rollout run cancelled before the
    # last step of the first, a search stopped after a -1 probe on the second (steps 0
    # and 1 unprobed: the error is somewhere in 0..2), and a finished run on the third
    ann, other = UserFactory(), UserFactory()
    chains = [ChainFactory(project=project, step_count=3) for _ in range(3)]
    machine = [[1, 1, None], [None, None, -1], [1, 1, 1]]
    for chain, ratings in zip(chains, machine, strict=True):
        _people(chain, [1, 1, 1], ann, other)
        machine_labels(chain=chain, ratings=ratings, source="monte_carlo")

    # When
    (quality,) = machine_source_quality(project=project)

    # Then only the finished run's first error is compared (a hit); the steps each rated
    # still count in kappa's matrix
    consensus = quality.against[0]
    assert (consensus.first_error.hits, consensus.first_error.total) == (1, 1)
    assert consensus.steps == 2 + 1 + 3


def test_only_leads_and_ml_staff_read_machine_quality(project, make_member, client_for):
    chain = ChainFactory(project=project, step_count=2)
    machine_labels(chain=chain, ratings=[1, -1], source="judge", run_kind="judge")
    url = f"/api/v1/projects/{project.pk}/machine-quality/"

    for role, status in ((Role.LEAD, 200), (Role.ML, 200), (Role.ANNOTATOR, 403)):
        response = client_for(make_member(project, role)).get(url)
        assert response.status_code == status, role
    assert client_for(UserFactory()).get(url).status_code == 404
    body = client_for(make_member(project, Role.LEAD)).get(url).json()
    assert [(s["source"], [a["reference"] for a in s["against"]]) for s in body] == [
        ("judge", ["consensus", "gold"])
    ]
