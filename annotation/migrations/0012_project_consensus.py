from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0011_snapshotchain_tied"),
    ]

    operations = [
        migrations.AddField(
            model_name="project",
            name="consensus",
            field=models.CharField(
                choices=[
                    ("majority", "Majority vote"),
                    (
                        "dawid_skene",
                        "Dawid-Skene (annotator reliability learned from the labels)",
                    ),
                ],
                default="majority",
                help_text=(
                    "How a step's votes become its label: majority vote, or Dawid-Skene, "
                    "which learns each annotator's reliability from all the project's labels "
                    "and its gold chains and weighs their votes by it. Snapshots use the "
                    "chosen one; review shows both."
                ),
                max_length=20,
            ),
        ),
        migrations.AddConstraint(
            model_name="project",
            constraint=models.CheckConstraint(
                condition=models.Q(("consensus__in", ["majority", "dawid_skene"])),
                name="project_consensus_valid",
            ),
        ),
    ]
