from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0012_project_consensus"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="annotation",
            index=models.Index(
                condition=models.Q(("source", "human")),
                fields=["annotator", "id"],
                name="annotation_history",
            ),
        ),
    ]
