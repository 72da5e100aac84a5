"""Consensus: the one label per step that training uses, with the share of votes behind it.

Rule order for a step (the first that applies wins):

1. the chain's current adjudication by a lead, on the steps it rates, with support 1.0
   (only the newest adjudication counts: a later one supersedes the earlier, and the
   steps it leaves unrated fall through to the rules below);
2. majority vote over the chain's *current* human annotations: one vote per annotator,
   from their latest revision (an annotation that a newer one supersedes does not count);
   with ``Project.import_labels == "vote"`` each current import annotation is one more vote;
3. with ``import_labels == "fallback"`` (the default), on a chain that no person has
   labeled at all, the vote over its import annotations;
4. otherwise, and on every step nobody rated (e.g. after the first error in first_error
   mode), no label: None.

Tie rule: the lowest of the tied ratings wins (-1 before 0 before +1). A tie means the
annotators could not agree that the step is sound, and teaching a reward model that a
disputed step is correct is the costlier mistake: a PRM that rewards a flawed step steers
search toward it, while one that doubts a sound step only costs a little recall. The
support of a tie is then 1/2 (or 1/3), which lets training down-weight it.

``support`` is the share of the step's votes that went to the winning rating.

With ``Project.consensus == "dawid_skene"`` rule 2 (and 3) take each step's label from a
Dawid-Skene model fitted over all the project's counted votes (``dawid_skene_fit``):
each voter's reliability is learned from the labels, and from the gold chains' answer
keys, and a step's label is the most probable one, with its posterior probability as its
support. A posterior tie is a tie, as in majority vote (the lowest of the tied ratings,
flagged ``tied``). Adjudications still win.

The votes and the majority over one step live in ``annotation.quality.votes``, the
project's Dawid-Skene fit in ``annotation.quality.consensus_fit``. ``chain_consensus``
(like ``votes.step_consensus``) takes plain lists so it is tested without a database;
``consensus_for_chains`` loads the votes of many chains in one query.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from annotation.models import AnnotationSource, ConsensusMethod, ImportLabels, Project
from annotation.quality.consensus_fit import DawidSkeneFit, StepPosterior, dawid_skene_fit
from annotation.quality.votes import Label, Vote, counted_votes, step_tally, votes_for_chains


@dataclass(frozen=True, slots=True)
class ChainConsensus:
    labels: list[Label]
    support: list[float | None]
    votes: list[Vote] = field(default_factory=list)
    # Per step: the votes tie (no ruling): ``labels`` holds the tie rule's pick, which the
    # pages show as a tie, never as a consensus. Empty for a consensus built without it.
    tied: list[bool] = field(default_factory=list)

    @property
    def has_label(self) -> bool:
        return any(label is not None for label in self.labels)


def chain_consensus(
    *,
    step_count: int,
    votes: Sequence[Vote],
    import_labels: str = ImportLabels.FALLBACK,
    learned: Sequence[StepPosterior | None] | None = None,
) -> ChainConsensus:
    """Consensus of every step of one chain from its current votes (see the module
    docstring for the rules). ``votes`` must already hold only current revisions.
    ``learned``: Dawid-Skene's posterior per step index (``DawidSkeneFit.chain``), which
    replaces the majority vote on the steps it covers."""
    adjudications = [vote for vote in votes if vote.source == AnnotationSource.ADJUDICATION]
    # Votes come oldest first, so the last is the current ruling.
    ruling = adjudications[-1] if adjudications else None
    counted = counted_votes(votes=votes, import_labels=import_labels)
    labels: list[Label] = []
    support: list[float | None] = []
    tied: list[bool] = []
    for index in range(step_count):
        if ruling is not None and index < len(ruling.labels) and ruling.labels[index] is not None:
            labels.append(ruling.labels[index])
            support.append(1.0)
            tied.append(False)
            continue
        posterior = learned[index] if learned is not None and index < len(learned) else None
        if posterior is not None:
            labels.append(posterior.label)
            support.append(posterior.probability)
            tied.append(posterior.tied)
            continue
        label, share, tie = step_tally(
            rating
            for vote in counted
            if index < len(vote.labels) and (rating := vote.labels[index]) is not None
        )
        labels.append(label)
        support.append(share)
        tied.append(tie)
    behind = [*counted, ruling] if ruling is not None else list(counted)
    return ChainConsensus(labels=labels, support=support, votes=behind, tied=tied)


def consensus_for_chains(
    *,
    chain_step_counts: Mapping[int, int],
    import_labels: str,
    project: Project | None = None,
    fit: DawidSkeneFit | None = None,
) -> dict[int, ChainConsensus]:
    """Consensus of each chain given as {chain id: step count}, all of one project, by the
    project's ``consensus`` method. Two queries with majority vote (the project, unless
    given, and the votes); Dawid-Skene adds its fit (``dawid_skene_fit``: two queries when
    it is cached) unless the caller passes the ``fit`` to use (a snapshot fits once for
    all its chunks). Chains with no votes get all-None labels."""
    if not chain_step_counts:
        return {}
    if project is None:
        project = Project.objects.filter(chains__pk=next(iter(chain_step_counts))).first()
    votes = votes_for_chains(chain_ids=list(chain_step_counts))
    if fit is None and project is not None and project.consensus == ConsensusMethod.DAWID_SKENE:
        fit = dawid_skene_fit(project=project, import_labels=import_labels)
    return {
        chain_id: chain_consensus(
            step_count=step_count,
            votes=votes.get(chain_id, []),
            import_labels=import_labels,
            learned=fit.chain(chain_id=chain_id) if fit is not None else None,
        )
        for chain_id, step_count in chain_step_counts.items()
    }
