"""The import's writer on any database but PostgreSQL (SQLite for `make demo`):
bulk_create through the ORM."""

from __future__ import annotations

import json
from collections.abc import Sequence

from annotation.datasets.import_rows import (
    IMPORT_RUN_KIND,
    ImportRow,
    NewProblem,
    chain_ratings,
    label_source_name,
)
from annotation.models import (
    Annotation,
    AnnotationSource,
    Chain,
    ImportBatch,
    MachineLabel,
    MachineSource,
    Problem,
    Project,
    Step,
    StepRating,
)


class OrmWriter:
    """Any other database (SQLite for `make demo`): bulk_create in batches, ids read
    back by their unique keys so it does not depend on the backend returning them."""

    batch_size = 500

    def __init__(self, *, project: Project, batch: ImportBatch) -> None:
        self.project = project
        self.batch = batch

    def chains_existing(self, *, hashes: Sequence[str]) -> set[str]:
        return set(
            Chain.objects.filter(project=self.project, content_hash__in=hashes).values_list(
                "content_hash", flat=True
            )
        )

    def problems_existing(self, *, hashes: Sequence[str]) -> dict[str, tuple[int, str]]:
        return {
            key: (problem_id, reference)
            for key, problem_id, reference in Problem.objects.filter(
                project=self.project, content_hash__in=hashes
            ).values_list("content_hash", "id", "reference_answer")
        }

    def problems_insert(self, *, problems: Sequence[NewProblem]) -> dict[str, int]:
        Problem.objects.bulk_create(
            [
                Problem(
                    project=self.project,
                    text=problem.text,
                    reference_answer=problem.reference_answer,
                    content_hash=problem.content_hash,
                )
                for problem in problems
            ],
            batch_size=self.batch_size,
        )
        return {
            key: problem_id
            for key, (problem_id, _) in self.problems_existing(
                hashes=[problem.content_hash for problem in problems]
            ).items()
        }

    def chains_insert(self, *, rows: Sequence[ImportRow], problem_ids: dict[str, int]) -> int:
        Chain.objects.bulk_create(
            [
                Chain(
                    project=self.project,
                    problem_id=problem_ids[row.problem_hash],
                    import_batch=self.batch,
                    content_hash=row.chain_hash,
                    final_answer=row.chain.answer,
                    generator=row.chain.generator,
                    meta=json.loads(row.meta_json),
                    step_count=len(row.chain.steps),
                )
                for row in rows
            ],
            batch_size=self.batch_size,
        )
        chain_ids = dict(
            Chain.objects.filter(
                project=self.project, content_hash__in=[row.chain_hash for row in rows]
            ).values_list("content_hash", "id")
        )
        Step.objects.bulk_create(
            [
                Step(chain_id=chain_ids[row.chain_hash], index=index, text=text)
                for row in rows
                for index, text in enumerate(row.chain.steps)
            ],
            batch_size=self.batch_size,
        )
        labeled = [row for row in rows if chain_ratings(row.chain)]
        if not labeled:
            return 0
        return self._labels_insert(labeled=labeled, chain_ids=chain_ids)

    def _labels_insert(self, *, labeled: Sequence[ImportRow], chain_ids: dict[str, int]) -> int:
        """The labeled chains' import annotations, their ratings and their import machine
        labels (``chain_ids``: by content hash); the rating count."""
        labeled_chain_ids = [chain_ids[row.chain_hash] for row in labeled]
        Annotation.objects.bulk_create(
            [
                Annotation(
                    chain_id=chain_ids[row.chain_hash],
                    source=AnnotationSource.IMPORT,
                    source_name=label_source_name(chain=row.chain, batch_format=self.batch.format),
                    import_batch=self.batch,
                )
                for row in labeled
            ],
            batch_size=self.batch_size,
        )
        annotation_ids = dict(
            Annotation.objects.filter(
                import_batch=self.batch, chain_id__in=labeled_chain_ids
            ).values_list("chain_id", "id")
        )
        step_ids = {
            (chain_id, index): step_id
            for step_id, chain_id, index in Step.objects.filter(
                chain_id__in=labeled_chain_ids
            ).values_list("id", "chain_id", "index")
        }
        ratings = [
            StepRating(
                annotation_id=annotation_ids[chain_ids[row.chain_hash]],
                step_id=step_ids[(chain_ids[row.chain_hash], index)],
                rating=rating,
            )
            for row in labeled
            for index, rating in chain_ratings(row.chain)
        ]
        StepRating.objects.bulk_create(ratings, batch_size=self.batch_size)
        MachineLabel.objects.bulk_create(
            [
                MachineLabel(
                    project=self.project,
                    chain_id=chain_ids[row.chain_hash],
                    step_id=step_ids[(chain_ids[row.chain_hash], index)],
                    source=MachineSource.IMPORT,
                    rating=rating,
                    model=label_source_name(chain=row.chain, batch_format=self.batch.format),
                    run_kind=IMPORT_RUN_KIND,
                    run_id=self.batch.pk,
                )
                for row in labeled
                for index, rating in chain_ratings(row.chain)
            ],
            batch_size=self.batch_size,
        )
        return len(ratings)
