"""The beat schedule of re-planning: every hour, editable in the admin.

Created once, by name: a task an admin has edited (another interval, disabled) is left as it
is when migrations run again. A re-plan whose inputs have not changed stores nothing, so an
hourly run costs one problem build and one hash when nothing happened.
"""

from django.db import migrations
from django.utils import timezone

TASK_NAME = "plans: re-plan"
TASK = "headroom.plans.replan_scheduled"
EVERY_S = 3600


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
            "Re-plan from policies, forecast peaks and capacity figures; unchanged inputs make "
            "no new plan."
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
        ("plans", "0003_role_permissions"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
    ]

    operations = [migrations.RunPython(install, uninstall)]
