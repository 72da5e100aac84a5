"""Agreement: Krippendorff's alpha (ordinal) against hand-computed values and the PyPI
``krippendorff`` package, the missing-after-first-error rule, pair and first-error
agreement, and which annotations count."""

from __future__ import annotations

import krippendorff
import numpy as np
import pytest

from annotation.models import LabelingMode
from annotation.quality.agreement import agreement_compute, current_human_ratings
from annotation.quality.agreement_math import (
    first_error_agreement,
    krippendorff_alpha_ordinal,
    ordinal_delta,
)
from annotation.quality.review import AdjudicatedRating, adjudication_create
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings

A, B, C = 1, 2, 3
# The hand-computed example (coders A, B, C; units 1..5; missing = not rated):
#   u1: A=+1 B=+1 C=+1 | u2: A=+1 B=0 | u3: A=-1 B=-1 C=0 | u4: A=0 B=+1 | u5: A=+1
HAND = [
    (1, A, 1), (1, B, 1), (1, C, 1),
    (2, A, 1), (2, B, 0),
    (3, A, -1), (3, B, -1), (3, C, 0),
    (4, A, 0), (4, B, 1),
    (5, A, 1),
]  # fmt: skip


def _arrays(rows):
    unit, coder, value = (np.array(column) for column in zip(*rows, strict=True))
    return {"unit": unit, "coder": coder, "value": value}


def _reliability_matrix(rows, coders, units):
    data = np.full((len(coders), len(units)), np.nan)
    for unit, coder, value in rows:
        data[coders.index(coder), units.index(unit)] = value
    return data


def _package_alpha(data) -> float:
    return krippendorff.alpha(
        reliability_data=data, level_of_measurement="ordinal", value_domain=[-1, 0, 1]
    )


def test_ordinal_delta_uses_the_marginals():
    # n = (2, 3, 5): delta(-1,0) = (5 - 2.5)^2, delta(0,1) = (8 - 4)^2, delta(-1,1) = (10 - 3.5)^2
    delta = ordinal_delta(np.array([2.0, 3.0, 5.0]))

    assert delta.tolist() == [[0.0, 6.25, 42.25], [6.25, 0.0, 16.0], [42.25, 16.0, 0.0]]


def test_alpha_matches_the_hand_computed_example():
    # Given the example above. By hand: coincidences (rows -1, 0, +1)
    # [[1, 1, 0], [1, 0, 2], [0, 2, 3]], n = 10, sum(o * delta) = 76.5,
    # sum(n_c n_k delta) = 1400, so alpha = 1 - 9 * 76.5 / 1400.
    result = krippendorff_alpha_ordinal(**_arrays(HAND))

    assert result.coincidences == [[1, 1, 0], [1, 0, 2], [0, 2, 3]]
    assert result.pairable_values == 10
    assert result.units == 4  # u5 has one rating: not pairable
    assert result.alpha == pytest.approx(1 - 9 * 76.5 / 1400)
    # ... and the package agrees
    data = _reliability_matrix(HAND, [A, B, C], [1, 2, 3, 4, 5])
    assert result.alpha == pytest.approx(_package_alpha(data))


def test_per_annotator_alpha_counts_only_pairs_involving_the_annotator():
    # By hand, D_e = 1400 / (10 * 9). A's values' mean distance to the others in their
    # unit: u1 0, u2 16, u3 (0 + 6.25) / 2, u4 16 -> 8.78125. C's: u1 0, u3 6.25 -> 3.125.
    result = krippendorff_alpha_ordinal(**_arrays(HAND))
    by_coder = {coder.coder: coder for coder in result.coders}

    assert by_coder[A].values == 4
    assert by_coder[A].alpha == pytest.approx(1 - 8.78125 * 90 / 1400)
    assert by_coder[C].values == 2
    assert by_coder[C].alpha == pytest.approx(1 - 3.125 * 90 / 1400)


def test_pair_alpha_is_the_two_annotators_alone():
    # A and B share u1..u4: (+1,+1) (+1,0) (-1,-1) (0,+1); by hand n = (2, 2, 4),
    # sum(o * delta) = 36, sum(n_c n_k delta) = 576, alpha = 1 - 7 * 36 / 576 = 0.5625.
    result = krippendorff_alpha_ordinal(**_arrays(HAND))
    pairs = {(pair.coder_a, pair.coder_b): pair for pair in result.pairs}

    assert set(pairs) == {(A, B), (A, C), (B, C)}
    assert pairs[(A, B)].units == 4
    assert pairs[(A, B)].alpha == pytest.approx(0.5625)
    # A and C share u1 (+1, +1) and u3 (-1, 0): checked against the package
    data = _reliability_matrix(
        [r for r in HAND if r[1] in (A, C) and r[0] in (1, 3)], [A, C], [1, 3]
    )
    assert pairs[(A, C)].alpha == pytest.approx(_package_alpha(data))


@pytest.mark.parametrize("seed", range(8))
def test_alpha_matches_the_krippendorff_package_on_random_data(seed):
    # Given random ratings by 2..6 coders on 5..80 units, about a third missing
    rng = np.random.default_rng(seed)
    coders, units = int(rng.integers(2, 7)), int(rng.integers(5, 81))
    data = rng.integers(-1, 2, size=(coders, units)).astype(float)
    data[rng.random(data.shape) < 0.35] = np.nan
    coder, unit = np.nonzero(~np.isnan(data))

    result = krippendorff_alpha_ordinal(
        unit=unit * 7 + 1000, coder=coder + 50, value=data[coder, unit].astype(int)
    )

    assert result.alpha == pytest.approx(_package_alpha(data))
    for pair in result.pairs:
        rows = data[[pair.coder_a - 50, pair.coder_b - 50]]
        both = ~np.isnan(rows).any(axis=0)
        assert pair.units == int(both.sum())
        if pair.alpha is not None:
            assert pair.alpha == pytest.approx(_package_alpha(rows[:, both]))


def test_with_two_coders_each_coders_alpha_is_the_overall_alpha():
    rows = [(u, coder, v) for u, (a, b) in enumerate([(1, 1), (1, 0), (-1, 0), (0, 0)])
            for coder, v in ((A, a), (B, b))]  # fmt: skip

    result = krippendorff_alpha_ordinal(**_arrays(rows))

    assert [coder.alpha for coder in result.coders] == pytest.approx([result.alpha] * 2)


def test_alpha_is_undefined_without_variation_or_pairs():
    same = krippendorff_alpha_ordinal(**_arrays([(1, A, 1), (1, B, 1), (2, A, 1), (2, B, 1)]))
    lonely = krippendorff_alpha_ordinal(**_arrays([(1, A, 1), (2, B, -1)]))

    assert same.alpha is None
    assert lonely.alpha is None
    assert lonely.pairs == []


def test_a_coder_who_disagrees_with_everyone_scores_lowest():
    # Given A and B agree on 20 units and C always says the opposite of them
    rng = np.random.default_rng(1)
    truth = rng.choice([-1, 1], size=20)
    rows = [(u, coder, int(v)) for u, t in enumerate(truth)
            for coder, v in ((A, t), (B, t), (C, -t))]  # fmt: skip

    result = krippendorff_alpha_ordinal(**_arrays(rows))
    by_coder = {coder.coder: coder.alpha for coder in result.coders}

    assert by_coder[C] < by_coder[A]
    assert by_coder[A] == pytest.approx(by_coder[B])


def test_first_error_agreement_counts_chain_pairs():
    # chain 10: A errs at step 1, B at step 2 (disagree)
    # chain 11: neither finds an error (agree, position -1)
    # chain 12: A and B err at step 0 (agree); C finds none (disagrees with both)
    rows = [
        (10, A, 0, 1), (10, A, 1, -1), (10, B, 0, 1), (10, B, 1, 1), (10, B, 2, -1),
        (11, A, 0, 1), (11, B, 0, 1),
        (12, A, 0, -1), (12, B, 0, -1), (12, C, 0, 1), (12, C, 1, 1),
    ]  # fmt: skip
    chain, coder, index, value = (np.array(c) for c in zip(*rows, strict=True))

    result = first_error_agreement(chain=chain, coder=coder, step_index=index, value=value)

    assert result.pairs == 5
    assert result.share == pytest.approx(2 / 5)
    assert result.by_pair == {(A, B): (2, 3), (A, C): (0, 1), (B, C): (0, 1)}
    assert result.by_coder == {A: (2, 4), B: (2, 4), C: (0, 2)}


# --- from the database ---------------------------------------------------------------


@pytest.mark.django_db
def test_steps_after_a_first_error_are_missing_not_disagreement(project):
    # Given a first_error project: on chain 1 ann stops at her -1 on step 1, while bob
    # rates on to step 2; on chain 2 they differ on step 2
    project.labeling_mode = LabelingMode.FIRST_ERROR
    project.save()
    ann, bob = UserFactory(username="ann"), UserFactory(username="bob")
    one = ChainFactory(project=project, step_count=3)
    two = ChainFactory(project=project, step_count=3)
    annotation_with_ratings(chain=one, annotator=ann, labels=[1, -1])
    annotation_with_ratings(chain=one, annotator=bob, labels=[1, 0, -1])
    annotation_with_ratings(chain=two, annotator=ann, labels=[1, 1, -1])
    annotation_with_ratings(chain=two, annotator=bob, labels=[1, 1, 0])

    # When
    result = agreement_compute(project=project)

    # Then ann's unrated step 2 of chain 1 stays missing: it is in no rating row ...
    data = current_human_ratings(project=project)
    assert len(data) == 11
    # ... bob's lone rating there is not pairable ...
    assert result.ratings == 11 and result.pairable_ratings == 10 and result.steps == 5
    # ... and alpha is the package's with a NaN in that cell (not a -1, not a 0)
    nan = np.nan
    matrix = np.array([[1, -1, nan, 1, 1, -1], [1, 0, -1, 1, 1, 0]])
    assert result.alpha == pytest.approx(_package_alpha(matrix))
    filled = np.array([[1, -1, -1, 1, 1, -1], [1, 0, -1, 1, 1, 0]])
    assert result.alpha != pytest.approx(_package_alpha(filled))
    # first error: chain 1 at 1 vs 2, chain 2 at 2 vs none
    assert result.first_error_pairs == 2 and result.first_error_share == 0.0


@pytest.mark.django_db
def test_only_current_human_annotations_count(project, make_member):
    # Given ann corrects her pass (the old one is superseded), bob labeled the chain
    # twice without a link (a re-queue: only his newest counts), an import disagrees,
    # and a lead adjudicated
    ann, bob, lead = (
        UserFactory(username="ann"),
        UserFactory(username="bob"),
        make_member(project, "lead"),
    )
    chain = ChainFactory(project=project, step_count=2)
    old = annotation_with_ratings(chain=chain, annotator=ann, labels=[-1, -1])
    annotation_with_ratings(chain=chain, annotator=ann, labels=[1, 1], supersedes=old)
    annotation_with_ratings(chain=chain, annotator=bob, labels=[-1, 0])
    annotation_with_ratings(chain=chain, annotator=bob, labels=[1, 0])
    annotation_with_ratings(chain=chain, labels=[-1, -1])
    steps = list(chain.steps.order_by("index"))
    adjudication_create(
        chain=chain, lead=lead, ratings=[AdjudicatedRating(steps[1].pk, -1)], note="no"
    )

    # When
    result = agreement_compute(project=project)

    # Then: ann [1, 1] against bob [1, 0] only
    assert result.ratings == 4
    assert result.coincidences == [[0, 0, 0], [0, 0, 1], [0, 1, 2]]
    assert {a.username for a in result.annotators} == {"ann", "bob"}
    [pair] = result.pairs
    assert {pair.username_a, pair.username_b} == {"ann", "bob"}
    assert pair.steps == 2
    assert pair.first_error_pairs == 1 and pair.first_error_share == 1.0


@pytest.mark.django_db
def test_agreement_of_an_unlabeled_project_is_empty(project, django_assert_max_num_queries):
    with django_assert_max_num_queries(2):
        result = agreement_compute(project=project)

    assert result.alpha is None and result.ratings == 0
    assert result.annotators == [] and result.pairs == []
    assert result.first_error_share is None
