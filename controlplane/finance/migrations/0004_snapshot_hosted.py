from django.db import migrations, models


def drop_stored_reports(apps, schema_editor):
    # Stored reports are a cache of rows computed from the snapshots; the rows now carry
    # ``hosted_cost``, so the next read recomputes them rather than serve the older columns.
    apps.get_model("finance", "FinanceReport").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [
        ("finance", "0003_report_size_and_last_read"),
    ]

    operations = [
        migrations.AddField(
            model_name="financesnapshot",
            name="hosted",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="Demand × hosted provider rows (hosted overflow), in the arrays' order.",
            ),
        ),
        migrations.RunPython(drop_stored_reports, migrations.RunPython.noop),
    ]
