"""The data manager sorts by any column it shows: each chain's agreement stored on the
chain (filled here for the chains two or more people finished), and the indexes the
sorted pages read in order (annotation/selectors/chain_order.py)."""

from django.db import migrations, models
from django.db.models import Count, F, FloatField, IntegerField, Max, Min, OuterRef, Subquery
from django.db.models.functions import Cast, Coalesce, Greatest


def agreement_fill(apps, schema_editor):
    # As annotation.services.chain_agreement on the day of this migration: one UPDATE.
    if schema_editor.connection.vendor == "postgresql":
        # Its sub-plans look each step's ratings up by index only on fresh statistics:
        # planned on none (tables filled moments ago), 4,000 chains took 13 minutes.
        for table in ("annotation_chain", "annotation_step", "annotation_steprating"):
            schema_editor.execute(f"ANALYZE {table}")
    Chain = apps.get_model("annotation", "Chain")
    Step = apps.get_model("annotation", "Step")
    StepRating = apps.get_model("annotation", "StepRating")
    spread = (
        StepRating.objects.filter(
            step=OuterRef("pk"),
            annotation__source="human",
            annotation__superseded_by__isnull=True,
        )
        .values("step")
        .annotate(spread=Max("rating") - Min("rating"))
        .values("spread")
    )
    disputed = (
        Step.objects.filter(chain=OuterRef("pk"))
        .annotate(spread=Subquery(spread, output_field=IntegerField()))
        .filter(spread__gt=0)
        .values("chain")
        .annotate(n=Count("pk"))
        .values("n")
    )
    steps = Cast(Greatest(F("step_count"), models.Value(1)), FloatField())
    Chain.objects.filter(finished_count__gte=2).update(
        agreement=models.Value(1.0)
        - Cast(Coalesce(Subquery(disputed, output_field=IntegerField()), 0), FloatField())
        / steps
    )


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0016_known_sign_in"),
    ]

    operations = [
        migrations.AddField(
            model_name="chain",
            name="agreement",
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.RunPython(agreement_fill, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="chain",
            index=models.Index(fields=["project", "finished_count", "id"], name="chain_by_passes"),
        ),
        migrations.AddIndex(
            model_name="chain",
            index=models.Index(
                condition=models.Q(("agreement__isnull", False)),
                fields=["project", "agreement", "id"],
                name="chain_by_agreement",
            ),
        ),
    ]
