# An import now keeps the labels its lines carry as machine labels of source "import" too
# (annotation/datasets/import_rows.py), which pre-labels and routing read. The imports made
# before that get theirs here, from their import annotations: one row per rated step,
# run_kind "import", the batch as the run, the annotation's source_name as the model (what
# a new import writes). A page of import annotations at a time, so memory stays bounded;
# the unique key (step, source, run_kind, run_id) makes a repeat write nothing.

from django.db import migrations

PAGE = 1_000


def import_machine_labels_fill(apps, schema_editor):
    Annotation = apps.get_model("annotation", "Annotation")
    StepRating = apps.get_model("annotation", "StepRating")
    MachineLabel = apps.get_model("annotation", "MachineLabel")
    imports = Annotation.objects.filter(source="import", import_batch__isnull=False)
    last = 0
    while True:
        page = list(
            imports.filter(pk__gt=last)
            .order_by("pk")
            .values_list("pk", "chain_id", "chain__project_id", "import_batch_id", "source_name")[
                :PAGE
            ]
        )
        if not page:
            return
        last = page[-1][0]
        by_annotation = {row[0]: row[1:] for row in page}
        labels = [
            MachineLabel(
                project_id=project_id,
                chain_id=chain_id,
                step_id=step_id,
                source="import",
                rating=rating,
                model=source_name,
                run_kind="import",
                run_id=batch_id,
            )
            for annotation_id, step_id, rating in StepRating.objects.filter(
                annotation_id__in=list(by_annotation)
            ).values_list("annotation_id", "step_id", "rating")
            for chain_id, project_id, batch_id, source_name in [by_annotation[annotation_id]]
        ]
        MachineLabel.objects.bulk_create(labels, batch_size=2_000, ignore_conflicts=True)


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0032_bulk_evaluation_sets"),
    ]

    operations = [
        migrations.RunPython(import_machine_labels_fill, migrations.RunPython.noop),
    ]
