"""Indexes the queue's writes paid for and no read needed: each foreign key below had an
index of its own whose column leads another index of the same table, and a submit
writes an entry into every index of the rows it inserts or moves (ten ratings, the
annotation, the chain: ``finished_count`` is indexed, so that update is never HOT).
The answer key's index now holds only the chains that have one.

Only the indexes go: the foreign keys stay as they are (Django's AlterField would drop
and re-add each constraint, checking every row of the table again)."""

import django.db.models.deletion
from django.db import migrations, models

# (index, table, column): Django's own names for the foreign keys' indexes.
DROPPED = (
    ("annotation_steprating_annotation_id_0d2f9f1c", "annotation_steprating", "annotation_id"),
    ("annotation_annotation_chain_id_fcb51b2a", "annotation_annotation", "chain_id"),
    ("annotation_chain_project_id_2c5f6cbd", "annotation_chain", "project_id"),
    ("annotation_chain_gold_annotation_id_ff562ed5", "annotation_chain", "gold_annotation_id"),
)


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0034_snapshot_notes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f"DROP INDEX IF EXISTS {name}",
                    reverse_sql=f"CREATE INDEX {name} ON {table} ({column})",
                )
                for name, table, column in DROPPED
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="annotation",
                    name="chain",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="annotations",
                        to="annotation.chain",
                    ),
                ),
                migrations.AlterField(
                    model_name="chain",
                    name="gold_annotation",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="annotation.annotation",
                    ),
                ),
                migrations.AlterField(
                    model_name="chain",
                    name="project",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="chains",
                        to="annotation.project",
                    ),
                ),
                migrations.AlterField(
                    model_name="steprating",
                    name="annotation",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="ratings",
                        to="annotation.annotation",
                    ),
                ),
            ],
        ),
        migrations.AddIndex(
            model_name="chain",
            index=models.Index(
                condition=models.Q(("gold_annotation__isnull", False)),
                fields=["gold_annotation"],
                name="chain_by_gold_annotation",
            ),
        ),
    ]
