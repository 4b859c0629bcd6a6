"""Role permissions on benchmark runs and capacity figure freshness.

Every role may view benchmark runs and the freshness of each shape's figures; ``policy-admin``
may also add runs (trigger a benchmark) in the admin.

As in ``telemetry.0002_role_permissions``, permissions are created first from the migration
state: on a fresh database post_migrate has not run yet.
"""

from django.contrib.auth.management import create_permissions
from django.contrib.contenttypes.management import create_contenttypes
from django.db import migrations

VIEW_ALL = ("policy-admin", "finance", "viewer")
MODELS = ("benchmarkrun", "shapefreshness")


def _grants():
    """(role, codename) of every permission this migration grants."""
    for role in VIEW_ALL:
        for model in MODELS:
            yield role, f"view_{model}"
    yield "policy-admin", "add_benchmarkrun"


def _permission(apps, db, codename):
    Permission = apps.get_model("auth", "Permission")
    return Permission.objects.using(db).filter(
        content_type__app_label="benchmarks", codename=codename
    )


def grant(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    db = schema_editor.connection.alias
    app_config = apps.get_app_config("benchmarks")
    # create_* skip app configs without a models module; the migration state has none.
    app_config.models_module = True
    create_contenttypes(app_config, verbosity=0, using=db, apps=apps)
    create_permissions(app_config, verbosity=0, using=db, apps=apps)
    app_config.models_module = None
    for role, codename in _grants():
        group, _ = Group.objects.using(db).get_or_create(name=role)
        group.permissions.add(*_permission(apps, db, codename))


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    db = schema_editor.connection.alias
    for role, codename in _grants():
        group = Group.objects.using(db).filter(name=role).first()
        if group is not None:
            group.permissions.remove(*_permission(apps, db, codename))


class Migration(migrations.Migration):
    dependencies = [
        ("benchmarks", "0001_initial"),
        ("policies", "0002_role_groups"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
