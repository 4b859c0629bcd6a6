"""Role permissions on telemetry records and on the Celery beat schedule.

Every role may view the telemetry records (pulls, derivations, observations, series, samples,
drift alerts); ``policy-admin`` may also change drift alerts (acknowledge them) and edit the
periodic-task schedule (django-celery-beat) in the admin.

As in ``policies.0002_role_groups``, permissions are created first from the migration state:
on a fresh database post_migrate has not run yet.
"""

from django.contrib.auth.management import create_permissions
from django.contrib.contenttypes.management import create_contenttypes
from django.db import migrations

VIEW_ALL = ("policy-admin", "finance", "viewer")
TELEMETRY_MODELS = (
    "telemetrypull",
    "profilederivation",
    "observedworkload",
    "telemetryseries",
    "telemetrysample",
    "driftalert",
)
SCHEDULE_MODELS = ("periodictask", "intervalschedule", "crontabschedule", "clockedschedule")


def _grants():
    """(role, app label, codename) of every permission this migration grants."""
    for role in VIEW_ALL:
        for model in TELEMETRY_MODELS:
            yield role, "telemetry", f"view_{model}"
    yield "policy-admin", "telemetry", "change_driftalert"
    for model in SCHEDULE_MODELS:
        for action in ("add", "change", "delete", "view"):
            yield "policy-admin", "django_celery_beat", f"{action}_{model}"


def _permission(apps, db, label, codename):
    Permission = apps.get_model("auth", "Permission")
    return Permission.objects.using(db).filter(content_type__app_label=label, codename=codename)


def grant(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    db = schema_editor.connection.alias
    for label in ("telemetry", "django_celery_beat"):
        app_config = apps.get_app_config(label)
        # create_* skip app configs without a models module; the migration state has none.
        app_config.models_module = True
        create_contenttypes(app_config, verbosity=0, using=db, apps=apps)
        create_permissions(app_config, verbosity=0, using=db, apps=apps)
        app_config.models_module = None
    for role, label, codename in _grants():
        group, _ = Group.objects.using(db).get_or_create(name=role)
        group.permissions.add(*_permission(apps, db, label, codename))


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    db = schema_editor.connection.alias
    for role, label, codename in _grants():
        group = Group.objects.using(db).filter(name=role).first()
        if group is not None:
            group.permissions.remove(*_permission(apps, db, label, codename))


class Migration(migrations.Migration):
    dependencies = [
        ("telemetry", "0001_initial"),
        ("policies", "0002_role_groups"),
        ("django_celery_beat", "0019_alter_periodictasks_options"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
