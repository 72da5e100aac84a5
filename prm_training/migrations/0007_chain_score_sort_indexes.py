"""The data manager sorted by PRM score or uncertainty walks the newest scoring run's
chain scores in order (prm_training/chain_scores.py)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("prm_training", "0006_chain_score_aggregates"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="chainscore",
            index=models.Index(
                fields=["scoring_run", "chain_score", "chain"], name="chain_score_by_score"
            ),
        ),
        migrations.AddIndex(
            model_name="chainscore",
            index=models.Index(
                fields=["scoring_run", "chain_uncertainty", "chain"],
                name="chain_score_by_uncertainty",
            ),
        ),
    ]
