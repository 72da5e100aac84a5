"""Each chain's score and uncertainty stored beside its step probabilities, so the data
manager filters on plain columns; existing rows are filled in chunks."""

from django.db import migrations, models

CHUNK = 2_000


def chain_aggregates(step_probs):
    # As prm_training.models.chain_aggregates on the day of this migration.
    if not step_probs:
        return None, None
    return min(step_probs), round(max(1 - abs(2 * p - 1) for p in step_probs), 12)


def fill(apps, schema_editor):
    ChainScore = apps.get_model("prm_training", "ChainScore")
    last = 0
    while True:
        rows = list(ChainScore.objects.filter(pk__gt=last).order_by("pk")[:CHUNK])
        if not rows:
            return
        for row in rows:
            row.chain_score, row.chain_uncertainty = chain_aggregates(
                [float(p) for p in row.step_probs or []]
            )
        ChainScore.objects.bulk_update(rows, ["chain_score", "chain_uncertainty"])
        last = rows[-1].pk


class Migration(migrations.Migration):
    dependencies = [
        ("prm_training", "0005_model_version_zero_shot"),
    ]

    operations = [
        migrations.AddField(
            model_name="chainscore",
            name="chain_score",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="chainscore",
            name="chain_uncertainty",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]
