"""Which machine sources have written labels in a project, and what a lead is told when
pre-labels or routing name one that has not: a source with no labels shows no
verdict and routes nothing, so choosing it is allowed (the labels may come later) but
never silent. Each warning says what writes that source's labels:

- ``monte_carlo``: a rollout run, ``judge``: a judge run (the ML page);
- ``prm``: a scoring run, which writes the active version's verdicts on the chains it
  scores (the training app's ``services.scoring_labels``);
- ``import``: an import whose lines carry step labels (``datasets.import_rows``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Exists, OuterRef

from annotation.models import MachineLabel, MachineSource, Project

# What writes each source's labels, as a lead does it.
HOW_TO_WRITE: dict[str, str] = {
    MachineSource.MONTE_CARLO: "start a rollout run on the Models page",
    MachineSource.JUDGE: "start a judge run on the Models page",
    MachineSource.PRM: "activate a model version and run scoring (the Models page, or "
    "score_chains), which writes its verdicts on the chains it scores",
    MachineSource.IMPORT: "import a file whose lines carry step labels (PRM800K, "
    "ProcessBench, Math-Shepherd, or generic with labels)",
}


@dataclass(frozen=True, slots=True)
class SourceWarning:
    """A setting that names a source with no machine label in the project."""

    field: str  # the project's setting: prelabel_source or routing_sources
    source: str
    message: str


def machine_source_unwritten(source: str) -> str:
    """What a lead reads about ``source`` having no labels yet.

    >>> machine_source_unwritten("prm")[:48]
    'No PRM machine labels yet: activate a model vers'
    """
    name = str(MachineSource(source).label) if source in MachineSource.values else source
    how = HOW_TO_WRITE.get(source, "run what writes them")
    return f"No {name} machine labels yet: {how}."


def machine_sources_written(*, project_id: int, sources: Iterable[str]) -> set[str]:
    """Which of ``sources`` have at least one machine label in the project. One query
    (an index probe per source on ``machine_label_by_project``); none without sources."""
    wanted = sorted({source for source in sources if source in MachineSource.values})
    if not wanted:
        return set()
    row = (
        Project.objects.filter(pk=project_id)
        .annotate(
            **{
                f"has_{source}": Exists(
                    MachineLabel.objects.filter(project_id=OuterRef("pk"), source=source)
                )
                for source in wanted
            }
        )
        .values(*(f"has_{source}" for source in wanted))
        .first()
    )
    return {source for source in wanted if row and row[f"has_{source}"]}


def machine_source_warnings(*, project: Project) -> list[SourceWarning]:
    """A warning for the pre-label source (while pre-labels are on) and each routing source
    that has written no label in the project, in that order. One query at most."""
    named: list[tuple[str, str]] = []
    if project.prelabels:
        named.append(("prelabel_source", project.prelabel_source))
    named += [("routing_sources", source) for source in project.routing_sources or []]
    if not named:
        return []
    written = machine_sources_written(project_id=project.pk, sources=[s for _, s in named])
    return [
        SourceWarning(field=field, source=source, message=machine_source_unwritten(source))
        for field, source in named
        if source not in written
    ]
