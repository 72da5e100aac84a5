"""The data manager's bulk actions (``BulkAction``), each chain's history of what leads
did to it (``ChainEvent``), and the lead named to review a chain (``Chain.reviewer``)."""
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('annotation', '0018_invite'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='BulkAction',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('requeue', 'Requeue for more passes'), ('gold_mark', 'Mark gold'), ('gold_unmark', 'Unmark gold'), ('unflag', 'Clear the flag'), ('reviewer', 'Assign a reviewer')], max_length=20)),
                ('params', models.JSONField(blank=True, default=dict)),
                ('chain_ids', models.JSONField(blank=True, null=True)),
                ('filters', models.JSONField(blank=True, null=True)),
                ('expected', models.PositiveIntegerField(default=0)),
                ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('done', 'Done'), ('failed', 'Failed (nothing changed)')], default='queued', max_length=10)),
                ('matched', models.PositiveIntegerField(default=0)),
                ('done', models.PositiveIntegerField(default=0)),
                ('changed', models.PositiveIntegerField(default=0)),
                ('unchanged', models.JSONField(blank=True, default=dict)),
                ('detail', models.TextField(blank=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('started_at', models.DateTimeField(blank=True, null=True)),
                ('finished_at', models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.CreateModel(
            name='ChainEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('requeued', 'Requeued'), ('gold_marked', 'Marked gold'), ('gold_unmarked', 'Unmarked gold'), ('unflagged', 'Flag cleared'), ('reviewer', 'Reviewer set')], max_length=20)),
                ('detail', models.JSONField(blank=True, default=dict)),
                ('created_at', models.DateTimeField()),
            ],
        ),
        migrations.AddField(
            model_name='chain',
            name='reviewer',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddIndex(
            model_name='chain',
            index=models.Index(condition=models.Q(('reviewer__isnull', False)), fields=['reviewer', 'project', 'id'], name='chain_by_reviewer'),
        ),
        migrations.AddField(
            model_name='bulkaction',
            name='created_by',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name='bulkaction',
            name='project',
            field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='bulk_actions', to='annotation.project'),
        ),
        migrations.AddField(
            model_name='chainevent',
            name='actor',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
        ),
        migrations.AddField(
            model_name='chainevent',
            name='bulk_action',
            field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='events', to='annotation.bulkaction'),
        ),
        migrations.AddField(
            model_name='chainevent',
            name='chain',
            field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='annotation.chain'),
        ),
        migrations.AddIndex(
            model_name='bulkaction',
            index=models.Index(fields=['project', '-id'], name='bulk_action_by_project'),
        ),
        migrations.AddConstraint(
            model_name='bulkaction',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['queued', 'running', 'done', 'failed'])), name='bulk_action_status_valid'),
        ),
        migrations.AddConstraint(
            model_name='bulkaction',
            constraint=models.CheckConstraint(condition=models.Q(('kind__in', ['requeue', 'gold_mark', 'gold_unmark', 'unflag', 'reviewer'])), name='bulk_action_kind_valid'),
        ),
        migrations.AddConstraint(
            model_name='bulkaction',
            constraint=models.CheckConstraint(condition=models.Q(('chain_ids__isnull', True), ('filters__isnull', True), _connector='XOR'), name='bulk_action_one_selection'),
        ),
        migrations.AddIndex(
            model_name='chainevent',
            index=models.Index(fields=['chain', '-id'], name='chain_event_by_chain'),
        ),
        migrations.AddConstraint(
            model_name='chainevent',
            constraint=models.CheckConstraint(condition=models.Q(('kind__in', ['requeued', 'gold_marked', 'gold_unmarked', 'unflagged', 'reviewer'])), name='chain_event_kind_valid'),
        ),
    ]
