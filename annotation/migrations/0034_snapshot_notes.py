from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("annotation", "0033_import_machine_labels")]

    operations = [
        migrations.AddField(
            model_name="snapshotchain",
            name="notes",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text=(
                    "What the voters behind the row wrote, one entry per voter and step: "
                    '{"step", "by", "source", "rating", "rewrite"?, "comment"?} (rating: their '
                    "vote on that step; rewrite: their corrected text of it). Empty when no one "
                    "wrote anything (datasets.snapshot_notes)."
                ),
            ),
        ),
    ]
