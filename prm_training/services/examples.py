"""Labeled and unlabeled chains as the ML package's ``ChainExample``: what training,
evaluation, scoring and the simulator feed the PRM. The ML package never reads the
database; this module is where rows become its input."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from annotation.datasets.snapshot_reads import snapshot_examples_streamed, stated_verdict
from annotation.models import Chain, ImportLabels, Project, Snapshot, Step

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from prm_training.ml.data import ChainExample


def loop_snapshot_create(
    *,
    project: Project,
    user: User | None,
    training_run: int | None = None,
    evaluation_run: int | None = None,
) -> Snapshot:
    """A snapshot the loop takes for itself (a training run's, or an evaluation run's to
    measure on newer labels): it learns from every label as soon as it is given,
    unfinished chains too, an import's labels by the project's rule (none where the
    project ignores them), and tied steps at the consensus rule's lowest rating (a lead's
    dataset may choose less). A snapshot that includes imports reads "ignore" as
    "fallback" (a lead who ticks imported labels asked for them), so the loop asks only
    where the project counts them."""
    from annotation.datasets.snapshots import snapshot_create

    return snapshot_create(
        project=project,
        user=user,
        finished_only=False,
        include_imported=project.import_labels != ImportLabels.IGNORE,
        ties="lowest",
        training_run=training_run,
        evaluation_run=evaluation_run,
    )


# Chains whose subsets are read per query.
SUBSET_CHUNK = 2_000


def chain_subsets(*, chain_ids: Sequence[int]) -> dict[int, str]:
    """Each chain's subset, what ProcessBench's F1 is reported per
    (``ml.evaluation.subset_of``): a ``subset`` its import's metadata states, else the
    prefix of its record id (``gsm8k-12``), else the name of the file it was imported
    from; blank when none says."""
    from prm_training.ml.evaluation import subset_of

    ids = list(chain_ids)
    out: dict[int, str] = {}
    for start in range(0, len(ids), SUBSET_CHUNK):
        rows = Chain.objects.filter(pk__in=ids[start : start + SUBSET_CHUNK]).values_list(
            "id", "meta", "import_batch__filename"
        )
        for chain_id, meta, filename in rows:
            meta = meta if isinstance(meta, dict) else {}
            out[chain_id] = subset_of(
                stated=meta.get("subset"), record_id=meta.get("id"), source=filename or ""
            )
    return out


def evaluation_chain_ids(*, project_id: int) -> set[int]:
    """The chains of the project's evaluation sets as they are now
    (``annotation.datasets.evaluation_sets``): what no model is trained on."""
    return set(
        Chain.objects.filter(project_id=project_id, evaluation_set__isnull=False).values_list(
            "pk", flat=True
        )
    )


def snapshot_chain_examples(
    *, snapshot: Snapshot, split: str | None = None, without_evaluation: bool = False
) -> list[ChainExample]:
    """The snapshot's chains as the ML package's ChainExample, in chain order, labels from
    the snapshot (consensus at snapshot time, not the chain's labels now), read by the
    same streamed reader as the exports. ``without_evaluation``: leave out the chains of
    the project's evaluation sets as they are now, whenever the snapshot was taken (what
    training and the simulator read)."""
    from prm_training.ml.data import ChainExample

    held_out = evaluation_chain_ids(project_id=snapshot.project_id) if without_evaluation else set()
    examples = [
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
        if example.chain_id not in held_out
    ]
    return _with_subsets(examples)


def _with_subsets(examples: list[ChainExample]) -> list[ChainExample]:
    from dataclasses import replace

    subsets = chain_subsets(chain_ids=[example.chain_id for example in examples])
    return [replace(example, subset=subsets.get(example.chain_id, "")) for example in examples]


def chain_examples_build(
    *, chains: Sequence[tuple[Chain, tuple[int | None, ...] | None]], with_subsets: bool = False
) -> list[ChainExample]:
    """ChainExamples for (chain, labels) pairs, the steps of all chains read in one query
    (and, ``with_subsets``, their subsets in one more: what evaluation reports by; scoring
    has no use for them). The chains need their ``problem`` loaded (``select_related``)."""
    from prm_training.ml.data import ChainExample

    steps: dict[int, list[str]] = {chain.pk: [] for chain, _ in chains}
    for chain_id, text in (
        Step.objects.filter(chain_id__in=list(steps))
        .order_by("chain_id", "index")
        .values_list("chain_id", "text")
    ):
        steps[chain_id].append(text)
    examples = [
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
    return _with_subsets(examples) if with_subsets else examples
