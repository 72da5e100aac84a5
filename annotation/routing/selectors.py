"""What routing did (issue 23, ``routing.services``), for the dashboard and the API: how many
chains each rule holds, and how often the machines' agreement was wrong where a person
checked it (the spot checks), with a Wilson interval.

A spot check counts once people's consensus on it is there (its human passes reached the
overlap): it is wrong when that consensus places the first error elsewhere than the
sources agreed. A step whose votes tie before the first error leaves the consensus'
first error unknown, and the chain out of the count."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from annotation.first_error import first_error
from annotation.models import Chain, ChainRouting, Project
from annotation.quality.machine_quality import human_consensus_labels
from annotation.quality.prelabel_effects import Proportion, wilson


@dataclass(frozen=True, slots=True)
class RoutingSummary:
    """Chains per routing (``ChainRouting`` values; "" is none) and the spot checks'
    error rate: chains whose consensus disagrees with the machines, of those checked."""

    chains: dict[str, int]
    spot_checks_waiting: int
    spot_check_errors: Proportion


def routing_summary(*, project: Project) -> RoutingSummary:
    """The project's routing figures (module docstring). Two queries and a consensus of
    the checked spot checks."""
    counts = Counter(
        Chain.objects.filter(project=project)
        .exclude(routing=ChainRouting.NONE)
        .values_list("routing", flat=True)
    )
    rows = list(
        Chain.objects.filter(
            project=project, routing=ChainRouting.SPOT_CHECK, is_finished=True
        ).values_list("pk", "routing_first_error", "step_count")
    )
    checked = {pk: agreed for pk, agreed, _ in rows}
    step_counts = {pk: steps for pk, _, steps in rows}
    consensus = human_consensus_labels(project, step_counts)
    wrong = total = 0
    for chain_id, agreed in checked.items():
        people = first_error(consensus.get(chain_id, []), reading="reference")
        if people is None or agreed is None:
            continue
        total += 1
        wrong += people != agreed
    return RoutingSummary(
        chains={routing: counts.get(routing, 0) for routing in ChainRouting.values if routing},
        spot_checks_waiting=counts.get(ChainRouting.SPOT_CHECK, 0) - len(checked),
        spot_check_errors=wilson(wrong, total),
    )
