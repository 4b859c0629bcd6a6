"""Plans for every role to read: ``policy-admin``, ``finance`` and ``viewer`` may view plans,
their allocations and routing, and re-plan runs (in the admin; the API checks roles itself).

Nobody gets add, change or delete: plans are written only by re-planning, and approving or
rejecting one is a policy-admin action checked by role, not a model permission.
"""

from django.contrib.auth.management import create_permissions
from django.contrib.contenttypes.management import create_contenttypes
from django.db import migrations

ROLES = ("policy-admin", "finance", "viewer")
MODELS = ("plan", "planallocation", "planrouting", "replanrun")


def _permissions(apps, db):
    Permission = apps.get_model("auth", "Permission")
    ContentType = apps.get_model("contenttypes", "ContentType")
    app_config = apps.get_app_config("plans")
    # create_* skip app configs without a models module; the migration state has none.
    app_config.models_module = True
    create_contenttypes(app_config, verbosity=0, using=db, apps=apps)
    create_permissions(app_config, verbosity=0, using=db, apps=apps)
    app_config.models_module = None
    content_types = [
        ContentType.objects.db_manager(db).get_for_model(apps.get_model("plans", name))
        for name in MODELS
    ]
    return Permission.objects.using(db).filter(
        content_type__in=content_types, codename__in=[f"view_{name}" for name in MODELS]
    )


def grant_view(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    db = schema_editor.connection.alias
    permissions = list(_permissions(apps, db))
    for role in ROLES:
        group, _ = Group.objects.using(db).get_or_create(name=role)
        group.permissions.add(*permissions)


def revoke_view(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    db = schema_editor.connection.alias
    permissions = list(_permissions(apps, db))
    for group in Group.objects.using(db).filter(name__in=ROLES):
        group.permissions.remove(*permissions)


class Migration(migrations.Migration):
    dependencies = [
        ("plans", "0002_decisions_and_attempts"),
        ("policies", "0002_role_groups"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(grant_view, revoke_view)]
