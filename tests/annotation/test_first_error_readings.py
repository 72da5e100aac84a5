"""A chain's first error read one way everywhere (``annotation.first_error``): the three
readings, where they part, and the app's readers that share one."""

from __future__ import annotations

import doctest

import pytest

from annotation import first_error as first_error_module
from annotation.datasets.exporters.records import first_error_index
from annotation.first_error import first_error
from annotation.quality import gold_reads
from annotation.quality.gold_reads import compare_to_gold
from annotation.routing.machine_labels import (
    chain_machine_labels,
    machine_chain_labels,
    machine_first_errors,
)
from tests.factories import ChainFactory, machine_labels


@pytest.mark.parametrize("module", [first_error_module, gold_reads])
def test_the_examples_in_the_modules_hold(module: object) -> None:
    result = doctest.testmod(module)  # type: ignore[arg-type]
    assert result.attempted and not result.failed


@pytest.mark.parametrize(
    ("labels", "reference", "stated", "settled"),
    [
        ([1, -1, None], 1, 1, 1),  # an error named: every reading finds it
        ([1, 1, 1], -1, -1, -1),  # every step right
        ([1, None, -1], None, 2, None),  # a gap before the -1: a search's bound only
        ([None, 1, -1], None, 2, 2),  # a search that narrowed the error to step 2
        ([-1, None, None], 0, 0, 0),  # the first step wrong: nothing before it
        ([1, 1, None], None, -1, None),  # stopped early: only "stated" reads no error
        ([None, 1, 1], None, -1, -1),  # a probe skipped step 0, then the last step right
        ([None, None], None, None, None),  # nothing labeled
    ],
)
def test_the_readings_part_only_over_unlabeled_steps(
    labels: list[int | None], reference: int | None, stated: int | None, settled: int | None
) -> None:
    assert first_error(labels, reading="reference") == reference
    assert first_error(labels, reading="stated") == stated
    assert first_error(labels, reading="settled") == settled


def test_the_export_counts_an_unsure_step_wrong_only_when_asked() -> None:
    assert first_error_index(labels=[1, 0, 1], ambiguous="negative") == 1
    assert first_error_index(labels=[1, 0, 1], ambiguous="drop") == -1
    assert first_error_index(labels=[1, 0, None], ambiguous="drop") is None


def test_a_gold_match_reads_what_each_side_rated() -> None:
    # A pass that stopped at its error matches a key that rated on; neither -1 matches
    assert compare_to_gold(gold={0: 1, 1: -1, 2: 1}, mine={0: 1, 1: -1}).first_error_match
    assert compare_to_gold(gold={0: 1, 1: 1}, mine={0: 1, 1: 0}).first_error_match
    assert not compare_to_gold(gold={0: 1, 1: 1}, mine={0: -1}).first_error_match


@pytest.mark.django_db
def test_a_source_that_stopped_early_is_read_alike_by_the_pages_not_by_routing(project):
    # Given a rollout run cancelled after two of three steps, both right, and a judge
    # that named step 1
    chain = ChainFactory(project=project, step_count=3)
    machine_labels(chain=chain, ratings=[1, 1, None], run_id=1)
    machine_labels(chain=chain, ratings=[1, -1, None], source="judge", run_kind="judge")

    # When the review page, the data manager and routing read the sources
    columns = {
        c.source: c.first_error for c in chain_machine_labels(chain_id=chain.pk, step_count=3)
    }
    listed = machine_first_errors(chain_ids=[chain.pk])[chain.pk]
    rollouts, _ = machine_chain_labels(project_id=project.pk, source="monte_carlo")[chain.pk]

    # Then both pages show what each said (the rollouts: no error so far), and routing,
    # which needs the last step, takes no verdict from the rollouts
    assert columns == listed == {"monte_carlo": -1, "judge": 1}
    assert first_error(rollouts, reading="settled") is None
