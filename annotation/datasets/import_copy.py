"""The import's writer on PostgreSQL: ids taken from the sequences beforehand, so steps
can point at their chain without a round trip per row, and the rows sent through COPY
(``CopyTable``, which the load bench uses too)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from django.db import connection, models
from django.db.backends.base.base import BaseDatabaseWrapper

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


class CopyTable:
    """COPY into one model's table. The caller names the columns it sets; every other
    NOT NULL column gets the model field's default (Django keeps defaults in Python, not
    in the schema), so a field added later with a default does not break the import."""

    def __init__(
        self,
        model: type[models.Model],
        columns: Sequence[str],
        *,
        now: datetime,
        db: BaseDatabaseWrapper,
    ) -> None:
        meta = model._meta
        extra_columns: list[str] = []
        extra_values: list[Any] = []
        for model_field in meta.concrete_fields:
            if model_field.column in columns or model_field.primary_key:
                continue
            if getattr(model_field, "auto_now", False) or getattr(
                model_field, "auto_now_add", False
            ):
                value: Any = now
            elif model_field.has_default():
                value = model_field.get_default()
            # Field.has_db_default is Django's (5.0), missing from django-stubs.
            elif model_field.null or model_field.has_db_default():  # type: ignore[attr-defined]
                continue
            else:
                value = model_field.get_default()
                if value is None:
                    raise TypeError(
                        f"{meta.db_table}.{model_field.column} is NOT NULL without a default: "
                        "the COPY import must set it"
                    )
            extra_columns.append(model_field.column)
            extra_values.append(model_field.get_db_prep_save(value, db))
        quoted = ", ".join(db.ops.quote_name(name) for name in (*columns, *extra_columns))
        self.sql = f"COPY {db.ops.quote_name(meta.db_table)} ({quoted}) FROM STDIN"
        self.extra = tuple(extra_values)

    def copy(self, cursor: Any, rows: Iterable[tuple[Any, ...]]) -> None:
        with cursor.copy(self.sql) as copy:
            if self.extra:
                extra = self.extra
                for row in rows:
                    copy.write_row(row + extra)
            else:
                for row in rows:
                    copy.write_row(row)


class CopyWriter:
    """PostgreSQL: ids from the sequences, rows through COPY."""

    def __init__(self, *, project: Project, batch: ImportBatch, now: datetime) -> None:
        self.project = project
        self.batch = batch
        tables: dict[str, tuple[type[models.Model], tuple[str, ...]]] = {
            "problem": (Problem, ("id", "project_id", "text", "reference_answer", "content_hash")),
            "chain": (
                Chain,
                (
                    "id",
                    "project_id",
                    "problem_id",
                    "import_batch_id",
                    "content_hash",
                    "final_answer",
                    "generator",
                    "meta",
                    "step_count",
                ),
            ),
            "step": (Step, ("chain_id", "index", "text")),
            "step_with_id": (Step, ("id", "chain_id", "index", "text")),
            "annotation": (
                Annotation,
                ("id", "chain_id", "source", "source_name", "import_batch_id"),
            ),
            "rating": (StepRating, ("annotation_id", "step_id", "rating")),
            "machine_label": (
                MachineLabel,
                (
                    "project_id",
                    "chain_id",
                    "step_id",
                    "source",
                    "rating",
                    "model",
                    "run_kind",
                    "run_id",
                ),
            ),
        }
        self.tables = {
            name: CopyTable(model, columns, now=now, db=connection)
            for name, (model, columns) in tables.items()
        }
        self.sequences: dict[type[models.Model], str] = {}
        with connection.cursor() as cursor:
            for model in (Problem, Chain, Step, Annotation):
                cursor.execute(
                    "SELECT pg_get_serial_sequence(%s, %s)",
                    [model._meta.db_table, model._meta.pk.column],
                )
                self.sequences[model] = cursor.fetchone()[0]

    def _ids(self, cursor: Any, model: type[models.Model], count: int) -> list[int]:
        cursor.execute(
            "SELECT nextval(%s::regclass) FROM generate_series(1, %s)",
            [self.sequences[model], count],
        )
        return [row[0] for row in cursor.fetchall()]

    # One index probe per hash through LATERAL ... LIMIT 1: a plain `= ANY(...)` lets the
    # planner, with statistics gone stale during a big import, scan every chain of the
    # project through the project_id index instead.
    def chains_existing(self, *, hashes: Sequence[str]) -> set[str]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT wanted.hash FROM unnest(%s::text[]) AS wanted(hash) "
                f"CROSS JOIN LATERAL (SELECT 1 FROM {Chain._meta.db_table} AS c "
                "WHERE c.project_id = %s AND c.content_hash = wanted.hash LIMIT 1) AS found",
                [list(hashes), self.project.pk],
            )
            return {row[0] for row in cursor.fetchall()}

    def problems_existing(self, *, hashes: Sequence[str]) -> dict[str, tuple[int, str]]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT wanted.hash, found.id, found.reference_answer "
                "FROM unnest(%s::text[]) AS wanted(hash) "
                "CROSS JOIN LATERAL (SELECT p.id, p.reference_answer "
                f"FROM {Problem._meta.db_table} AS p "
                "WHERE p.project_id = %s AND p.content_hash = wanted.hash LIMIT 1) AS found",
                [list(hashes), self.project.pk],
            )
            return {key: (problem_id, reference) for key, problem_id, reference in cursor}

    def problems_insert(self, *, problems: Sequence[NewProblem]) -> dict[str, int]:
        project_id = self.project.pk
        with connection.cursor() as django_cursor:
            cursor = django_cursor.cursor
            ids = self._ids(cursor, Problem, len(problems))
            self.tables["problem"].copy(
                cursor,
                (
                    (pk, project_id, problem.text, problem.reference_answer, problem.content_hash)
                    for pk, problem in zip(ids, problems, strict=True)
                ),
            )
        return {problem.content_hash: pk for pk, problem in zip(ids, problems, strict=True)}

    def chains_insert(self, *, rows: Sequence[ImportRow], problem_ids: dict[str, int]) -> int:
        project_id, batch_id = self.project.pk, self.batch.pk
        with connection.cursor() as django_cursor:
            cursor = django_cursor.cursor
            chain_ids = self._ids(cursor, Chain, len(rows))
            self.tables["chain"].copy(
                cursor,
                (
                    (
                        chain_id,
                        project_id,
                        problem_ids[row.problem_hash],
                        batch_id,
                        row.chain_hash,
                        row.chain.answer,
                        row.chain.generator,
                        row.meta_json,
                        len(row.chain.steps),
                    )
                    for chain_id, row in zip(chain_ids, rows, strict=True)
                ),
            )
            if not any(row.chain.labels for row in rows):
                # The common unlabeled case: the identity column numbers the steps, and
                # nothing needs their ids back.
                self.tables["step"].copy(
                    cursor,
                    (
                        (chain_id, index, text)
                        for chain_id, row in zip(chain_ids, rows, strict=True)
                        for index, text in enumerate(row.chain.steps)
                    ),
                )
                return 0
            # Ratings point at steps, so the steps' ids are taken up front too. They need
            # not be contiguous (another session may draw from the sequence meanwhile):
            # each chain remembers where its ids start in the list.
            step_ids = self._ids(cursor, Step, sum(len(row.chain.steps) for row in rows))
            offsets: list[int] = []
            step_rows: list[tuple[int, int, int, str]] = []
            for chain_id, row in zip(chain_ids, rows, strict=True):
                offsets.append(len(step_rows))
                for index, text in enumerate(row.chain.steps):
                    step_rows.append((step_ids[len(step_rows)], chain_id, index, text))
            self.tables["step_with_id"].copy(cursor, step_rows)
            del step_rows
            labeled = [
                (chain_id, offset, row)
                for chain_id, offset, row in zip(chain_ids, offsets, rows, strict=True)
                if chain_ratings(row.chain)
            ]
            return self._labels_insert(cursor, labeled=labeled, step_ids=step_ids)

    def _labels_insert(
        self, cursor: Any, *, labeled: list[tuple[int, int, ImportRow]], step_ids: list[int]
    ) -> int:
        """The labeled chains' import annotations, their ratings and their import machine
        labels (``labeled``: chain id, where its step ids start, row); the rating count."""
        project_id, batch_id = self.project.pk, self.batch.pk
        annotation_ids = self._ids(cursor, Annotation, len(labeled))
        self.tables["annotation"].copy(
            cursor,
            (
                (
                    annotation_id,
                    chain_id,
                    AnnotationSource.IMPORT.value,
                    label_source_name(chain=row.chain, batch_format=self.batch.format),
                    batch_id,
                )
                for annotation_id, (chain_id, _, row) in zip(annotation_ids, labeled, strict=True)
            ),
        )
        rating_rows = [
            (annotation_id, step_ids[offset + index], rating)
            for annotation_id, (_, offset, row) in zip(annotation_ids, labeled, strict=True)
            for index, rating in chain_ratings(row.chain)
        ]
        self.tables["rating"].copy(cursor, rating_rows)
        self.tables["machine_label"].copy(
            cursor,
            (
                (
                    project_id,
                    chain_id,
                    step_ids[offset + index],
                    MachineSource.IMPORT.value,
                    rating,
                    label_source_name(chain=row.chain, batch_format=self.batch.format),
                    IMPORT_RUN_KIND,
                    batch_id,
                )
                for chain_id, offset, row in labeled
                for index, rating in chain_ratings(row.chain)
            ),
        )
        return len(rating_rows)
