"""Role permissions on emission records.

``policy-admin`` adds, changes, deletes and views sinks, views the outbox and its attempt log,
and may change outbox rows (the admin's "retry now" action; a row's own page stays
read-only); ``finance`` and ``viewer`` view all three. Permissions are created here from the
migration state, since post_migrate has not run yet on a fresh database.
"""

from django.contrib.auth.management import create_permissions
from django.contrib.contenttypes.management import create_contenttypes
from django.db import migrations

GRANTS = {
    "policy-admin": {
        "allocationsink": ("add", "change", "delete", "view"),
        "outboxentry": ("change", "view"),
        "deliveryattempt": ("view",),
    },
    "finance": {"allocationsink": ("view",), "outboxentry": ("view",), "deliveryattempt": ("view",)},
    "viewer": {"allocationsink": ("view",), "outboxentry": ("view",), "deliveryattempt": ("view",)},
}


def _permissions(apps, db, model_name, actions):
    Permission = apps.get_model("auth", "Permission")
    ContentType = apps.get_model("contenttypes", "ContentType")
    content_type = ContentType.objects.db_manager(db).get_for_model(
        apps.get_model("emission", model_name)
    )
    return Permission.objects.using(db).filter(
        content_type=content_type, codename__in=[f"{a}_{model_name}" for a in actions]
    )


def grant(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    db = schema_editor.connection.alias
    app_config = apps.get_app_config("emission")
    # create_* skip app configs without a models module; the migration state has none.
    app_config.models_module = True
    create_contenttypes(app_config, verbosity=0, using=db, apps=apps)
    create_permissions(app_config, verbosity=0, using=db, apps=apps)
    app_config.models_module = None
    for role, models in GRANTS.items():
        group, _ = Group.objects.using(db).get_or_create(name=role)
        for model_name, actions in models.items():
            group.permissions.add(*_permissions(apps, db, model_name, actions))


def revoke(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    db = schema_editor.connection.alias
    for role, models in GRANTS.items():
        group = Group.objects.using(db).filter(name=role).first()
        if group is None:
            continue
        for model_name, actions in models.items():
            group.permissions.remove(*_permissions(apps, db, model_name, actions))


class Migration(migrations.Migration):
    dependencies = [
        ("emission", "0001_initial"),
        ("policies", "0002_role_groups"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(grant, revoke)]
