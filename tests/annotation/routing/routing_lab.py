"""Projects whose routing has something to do, for the routing API, worker and page tests:
two machine sources that people's consensus trusts (kappa 1 each), and chains nobody
started on that the sources agree or disagree on."""

from __future__ import annotations

from typing import Any

from annotation.models import Chain, MachineSource, Project
from tests.factories import ChainFactory, UserFactory, annotation_with_ratings, machine_labels

MC, JUDGE = MachineSource.MONTE_CARLO, MachineSource.JUDGE
RULES: dict[str, Any] = {
    "routing_sources": [MC, JUDGE],
    "routing_accept": True,
    "routing_spot_check": 0.0,
    "routing_min_kappa": 0.6,
}


def with_rules(project: Project, **rules: Any) -> Project:
    """The project with RULES (and any override) saved on it, read back."""
    Project.objects.filter(pk=project.pk).update(**{**RULES, **rules})
    return Project.objects.get(pk=project.pk)


def both_sources(chain: Chain, mc: list[int | None], judge: list[int | None]) -> None:
    machine_labels(chain=chain, ratings=mc, source=MC, run_kind="rollout", run_id=1)
    machine_labels(chain=chain, ratings=judge, source=JUDGE, run_kind="judge", run_id=1)


def trusted_sources(project: Project, chains: int = 4) -> list[Chain]:
    """Finished chains two people labeled and both sources got right: kappa 1 for each."""
    people = [UserFactory(), UserFactory()]
    out = []
    for index in range(chains):
        chain = ChainFactory(project=project, step_count=2)
        labels = [1, -1] if index % 2 else [1, 1]
        for person in people:
            annotation_with_ratings(chain=chain, labels=labels, annotator=person)
        both_sources(chain, labels, labels)
        out.append(chain)
    Chain.objects.filter(pk__in=[c.pk for c in out]).update(is_finished=True, finished_count=2)
    return out


def routing_chains(project: Project) -> dict[str, Chain]:
    """Trusted sources, and three fresh chains: one they agree on (first error at step
    1), one they disagree on, one with no machine verdict."""
    trusted_sources(project)
    agreed, disputed, plain = (ChainFactory(project=project, step_count=3) for _ in range(3))
    both_sources(agreed, [1, -1, None], [1, -1, None])
    both_sources(disputed, [1, 1, 1], [-1, None, None])
    return {"agreed": agreed, "disputed": disputed, "plain": plain}


def routing_of(chain: Chain) -> str:
    chain.refresh_from_db()
    return chain.routing
