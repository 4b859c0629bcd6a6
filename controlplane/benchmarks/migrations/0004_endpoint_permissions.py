"""Role permissions on benchmark endpoints.

``policy-admin`` adds, changes, deletes and views the endpoint each shape's load test measures;
``finance`` and ``viewer`` view them. As in ``0002_role_permissions``, permissions are created
first from the migration state: on a fresh database post_migrate has not run yet.
"""

from django.contrib.auth.management import create_permissions
from django.contrib.contenttypes.management import create_contenttypes
from django.db import migrations

MODEL = "benchmarkendpoint"
GRANTS = {
    "policy-admin": ("add", "change", "delete", "view"),
    "finance": ("view",),
    "viewer": ("view",),
}


def _permissions(apps, db, actions):
    Permission = apps.get_model("auth", "Permission")
    return Permission.objects.using(db).filter(
        content_type__app_label="benchmarks",
        codename__in=[f"{action}_{MODEL}" for action in actions],
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
    for role, actions in GRANTS.items():
        group, _ = Group.objects.using(db).get_or_create(name=role)
        group.permissions.add(*_permissions(apps, db, actions))


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    db = schema_editor.connection.alias
    for role, actions in GRANTS.items():
        group = Group.objects.using(db).filter(name=role).first()
        if group is not None:
            group.permissions.remove(*_permissions(apps, db, actions))


class Migration(migrations.Migration):
    dependencies = [
        ("benchmarks", "0003_benchmark_endpoint"),
        ("policies", "0002_role_groups"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
