"""``Assignment.chain_open`` with the index of an annotator's closed leases on open chains,
which the claim reads instead of the annotator's whole history, and the index of closed
leases by chain and annotator for the queue's per-chain probe."""

from django.db import migrations, models
from django.db.models import Exists, OuterRef, Q


def closed_leases_backfill(apps, schema_editor):
    """Clear ``chain_open`` on the closed leases of finished or gold chains. Before the
    index exists, so the update does not maintain it row by row."""
    Assignment = apps.get_model("annotation", "Assignment")
    Chain = apps.get_model("annotation", "Chain")
    closed_chain = Chain.objects.filter(pk=OuterRef("chain_id")).filter(
        Q(is_finished=True) | Q(is_gold=True)
    )
    Assignment.objects.filter(status__in=["submitted", "skipped"]).filter(
        Exists(closed_chain)
    ).update(chain_open=False)


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0006_gold"),
    ]

    operations = [
        migrations.AddField(
            model_name="assignment",
            name="chain_open",
            field=models.BooleanField(default=True, db_default=True),
        ),
        migrations.RunPython(closed_leases_backfill, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="assignment",
            index=models.Index(
                condition=models.Q(("chain_open", True), ("status__in", ["submitted", "skipped"])),
                fields=["annotator", "project", "chain"],
                name="assignment_done_open",
            ),
        ),
        migrations.AddIndex(
            model_name="assignment",
            index=models.Index(
                condition=models.Q(("status__in", ["submitted", "skipped"])),
                fields=["chain", "annotator"],
                name="assignment_done_by_chain",
            ),
        ),
    ]
