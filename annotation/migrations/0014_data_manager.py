"""The data manager (annotation/selectors/chains.py): a chain's extra labels asked by a
lead, the indexes its status and annotator filters page through in id order, and on
PostgreSQL the full-text indexes its search reads (``to_tsvector('simple', text)`` on
problems and steps; SQLite searches with LIKE and needs none)."""

from django.db import migrations, models

SEARCH_INDEXES = (
    ("annotation_problem_text_fts", "annotation_problem"),
    ("annotation_step_text_fts", "annotation_step"),
)


def search_indexes_create(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, table in SEARCH_INDEXES:
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS {name} ON {table} "
            "USING gin (to_tsvector('simple'::regconfig, text))"
        )


def search_indexes_drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, _ in SEARCH_INDEXES:
        schema_editor.execute(f"DROP INDEX IF EXISTS {name}")


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0013_annotation_history"),
    ]

    operations = [
        migrations.AddField(
            model_name="chain",
            name="extra_labels",
            field=models.PositiveSmallIntegerField(db_default=0, default=0),
        ),
        migrations.AddIndex(
            model_name="annotation",
            index=models.Index(
                condition=models.Q(("source", "human")),
                fields=["annotator", "chain"],
                name="annotation_by_annotator_chain",
            ),
        ),
        migrations.AddIndex(
            model_name="assignment",
            index=models.Index(
                condition=models.Q(("status", "skipped")),
                fields=["project", "chain"],
                name="assignment_skipped_by_project",
            ),
        ),
        migrations.AddIndex(
            model_name="chain",
            index=models.Index(fields=["project", "id"], name="chain_by_project"),
        ),
        migrations.AddIndex(
            model_name="chain",
            index=models.Index(
                condition=models.Q(("is_flagged", True)),
                fields=["project", "id"],
                name="chain_flagged_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="chain",
            index=models.Index(
                condition=models.Q(("is_finished", True)),
                fields=["project", "id"],
                name="chain_finished_idx",
            ),
        ),
        migrations.AddIndex(
            model_name="chain",
            index=models.Index(
                condition=models.Q(("finished_count__gte", 2)),
                fields=["project", "id"],
                name="chain_multi_labeled_idx",
            ),
        ),
        migrations.RunPython(search_indexes_create, search_indexes_drop, elidable=False),
    ]
