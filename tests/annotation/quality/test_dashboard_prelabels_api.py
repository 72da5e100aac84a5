"""The dashboard's verification figures (issue 23): acceptance of machine pre-labels,
seconds per chain and gold accuracy, with pre-labels and held out, each with a 95 %
interval. The passes go through the real queue, so the arms are what leases recorded."""

from __future__ import annotations

import math
from typing import Any

import pytest

from annotation.models import Role
from annotation.quality.prelabel_effects import mean_interval, wilson
from tests.annotation.quality.prelabel_lab import verified_project
from tests.factories import ChainFactory

pytestmark = pytest.mark.django_db

Z = 1.959963984540054  # the normal quantile of 0.975


def wilson_by_hand(hits: int, total: int) -> tuple[float, float]:
    p = hits / total
    centre = (p + Z * Z / (2 * total)) / (1 + Z * Z / total)
    half = Z * math.sqrt(p * (1 - p) / total + Z * Z / (4 * total * total)) / (1 + Z * Z / total)
    return centre - half, centre + half


@pytest.fixture
def verified(project) -> dict[str, Any]:
    return verified_project(project)


def test_the_dashboard_compares_the_arms_with_intervals(verified, client_for) -> None:
    response = client_for(verified["lead"]).get(
        f"/api/v1/projects/{verified['project'].pk}/dashboard/"
    )
    assert response.status_code == 200
    effect = response.json()["prelabels"]
    assert (effect["source"], effect["holdout"]) == ("judge", 1.0)
    shown, held = effect["shown"], effect["held_out"]

    # The unjudged chain's pass is in neither arm
    assert (shown["chains"], held["chains"]) == (3, 2)

    # Acceptance: 8 of 9 verdicts confirmed; held out, 5 of 6 ratings match the verdict
    assert (shown["agreement"]["hits"], shown["agreement"]["total"]) == (8, 9)
    assert (held["agreement"]["hits"], held["agreement"]["total"]) == (5, 6)
    for arm, (hits, total) in ((shown, (8, 9)), (held, (5, 6))):
        low, high = wilson_by_hand(hits, total)
        assert arm["agreement"]["rate"] == pytest.approx(hits / total)
        assert (arm["agreement"]["low"], arm["agreement"]["high"]) == (
            pytest.approx(low),
            pytest.approx(high),
        )

    # Seconds per chain: 10, 20, 30 (t with 2 degrees of freedom: 4.303) and 40, 60
    assert shown["seconds"]["n"] == 3 and shown["seconds"]["mean"] == pytest.approx(20.0)
    assert shown["seconds"]["high"] == pytest.approx(20 + 4.302653 * 10 / math.sqrt(3))
    assert shown["seconds"]["low"] == 0.0  # cut at zero
    assert held["seconds"]["mean"] == pytest.approx(50.0)
    assert held["seconds"]["high"] == pytest.approx(50 + 12.706205 * math.sqrt(200) / math.sqrt(2))

    # Gold: the accepted verdicts got 2 of the key's 3 steps; no gold pass was held out
    assert (shown["gold_accuracy"]["hits"], shown["gold_accuracy"]["total"]) == (2, 3)
    assert held["gold_accuracy"]["rate"] is None and held["gold_accuracy"]["total"] == 0


def test_no_figures_before_a_pass_had_verdicts(project, make_member, client_for) -> None:
    ChainFactory(project=project)
    response = client_for(make_member(project, Role.LEAD)).get(
        f"/api/v1/projects/{project.pk}/dashboard/"
    )
    assert response.status_code == 200
    assert response.json()["prelabels"] is None


def test_the_figures_are_the_current_source_s(verified, client_for) -> None:
    # Passes leased with the judge's verdicts say nothing about the PRM's
    project = verified["project"]
    project.prelabel_source = "prm"
    project.save()
    url = f"/api/v1/projects/{project.pk}/dashboard/"
    assert client_for(verified["lead"]).get(url).json()["prelabels"] is None


@pytest.mark.parametrize("role", [Role.ANNOTATOR, Role.ML])
def test_only_leads_read_the_figures(verified, make_member, client_for, role) -> None:
    response = client_for(make_member(verified["project"], role)).get(
        f"/api/v1/projects/{verified['project'].pk}/dashboard/"
    )
    assert response.status_code == 403


def test_interval_helpers_edge_cases() -> None:
    assert wilson(0, 0).low is None
    assert wilson(3, 3).high == pytest.approx(1.0) and wilson(3, 3).low < 1.0
    assert mean_interval(n=1, mean=5.0, sd=None).low is None
