from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0010_project_leads_rule_own_labels"),
    ]

    operations = [
        migrations.AddField(
            model_name="snapshotchain",
            name="tied",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text=(
                    "Indexes of the steps whose votes tie and that keep the lowest rating, "
                    'marked so (a snapshot taken with ties="mark"); empty otherwise.'
                ),
            ),
        ),
    ]
