"""The beat schedule of the job recovery sweep (controlplane.pipeline.recovery): every five
minutes, editable in the admin.

Created once, by name: a task an admin has edited (another interval, disabled) is left as it
is when migrations run again.
"""

from django.db import migrations
from django.utils import timezone

TASK_NAME = "jobs: re-send or fail jobs no worker finished"
TASK = "headroom.pipeline.recover_jobs"
EVERY_S = 300


def install(apps, schema_editor):
    db = schema_editor.connection.alias
    IntervalSchedule = apps.get_model("django_celery_beat", "IntervalSchedule")
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTasks = apps.get_model("django_celery_beat", "PeriodicTasks")
    if PeriodicTask.objects.using(db).filter(name=TASK_NAME).exists():
        return
    interval, _ = IntervalSchedule.objects.using(db).get_or_create(every=EVERY_S, period="seconds")
    PeriodicTask.objects.using(db).create(
        name=TASK_NAME,
        task=TASK,
        interval=interval,
        enabled=True,
        description=(
            "Re-send the tasks of jobs queued for long (lost by the broker); fail jobs queued "
            "or running past their limits, saying why."
        ),
    )
    # Beat reloads its schedule when this marker changes (migration models send no signals).
    PeriodicTasks.objects.using(db).update_or_create(
        ident=1, defaults={"last_update": timezone.now()}
    )


def uninstall(apps, schema_editor):
    db = schema_editor.connection.alias
    PeriodicTask = apps.get_model("django_celery_beat", "PeriodicTask")
    PeriodicTask.objects.using(db).filter(name=TASK_NAME, task=TASK).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_initial"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(install, uninstall)]
