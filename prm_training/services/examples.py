"""Labeled and unlabeled chains as the ML package's ``ChainExample``: what training,
evaluation, scoring and the simulator feed the PRM. The ML package never reads the
database; this module is where rows become its input."""

from __future__ import annotations

from typing import TYPE_CHECKING

from annotation.models import Chain, Snapshot, Step
from annotation.selectors.datasets import snapshot_examples_streamed, stated_verdict

if TYPE_CHECKING:
    from prm_training.ml.data import ChainExample


def snapshot_chain_examples(*, snapshot: Snapshot, split: str | None = None) -> list[ChainExample]:
    """The snapshot's chains as the ML package's ChainExample, in chain order, labels from
    the snapshot (consensus at snapshot time, not the chain's labels now), read by the
    same streamed reader as the exports."""
    from prm_training.ml.data import ChainExample

    return [
        ChainExample(
            chain_id=example.chain_id,
            problem=example.problem,
            steps=tuple(example.steps),
            labels=tuple(example.labels),
            answer=example.final_answer,
            reference_answer=example.reference_answer,
            answer_correct=example.answer_correct,
        )
        for example in snapshot_examples_streamed(snapshot=snapshot, split=split)
    ]


def chain_examples_build(
    *, chains: list[tuple[Chain, tuple[int | None, ...] | None]]
) -> list[ChainExample]:
    """ChainExamples for (chain, labels) pairs, the steps of all chains read in one query.
    The chains need their ``problem`` loaded (``select_related``)."""
    from prm_training.ml.data import ChainExample

    steps: dict[int, list[str]] = {chain.pk: [] for chain, _ in chains}
    for chain_id, text in (
        Step.objects.filter(chain_id__in=list(steps))
        .order_by("chain_id", "index")
        .values_list("chain_id", "text")
    ):
        steps[chain_id].append(text)
    return [
        ChainExample(
            chain_id=chain.pk,
            problem=chain.problem.text,
            steps=tuple(steps[chain.pk]),
            labels=labels,
            answer=chain.final_answer,
            reference_answer=chain.problem.reference_answer,
            answer_correct=stated_verdict(chain.meta),
        )
        for chain, labels in chains
    ]
