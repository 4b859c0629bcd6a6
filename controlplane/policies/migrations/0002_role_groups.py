"""The three role groups and their model permissions.

``policy-admin`` may add, change, delete and view every fleet and policy record (in the admin
and the API); ``finance`` and ``viewer`` may view them. Historical (audit) models get nothing:
history is read through the record's own admin, and nobody edits it.

Permissions are normally created after all migrations run (post_migrate), so on a fresh
database they do not exist yet here; they are created first, from the migration state.
"""

from django.contrib.auth.management import create_permissions
from django.contrib.contenttypes.management import create_contenttypes
from django.db import migrations

ROLE_ACTIONS = {
    "policy-admin": ("add", "change", "delete", "view"),
    "finance": ("view",),
    "viewer": ("view",),
}
APPS = ("fleet", "policies")


def _record_models(apps):
    """The fleet and policy models as of this migration, without their history models."""
    for label in APPS:
        for model in apps.get_app_config(label).get_models():
            if not model.__name__.startswith("Historical"):
                yield model


def grant_role_permissions(apps, schema_editor):
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    ContentType = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias

    for label in APPS:
        app_config = apps.get_app_config(label)
        # create_* skip app configs without a models module; the migration state has none.
        app_config.models_module = True
        create_contenttypes(app_config, verbosity=0, using=db, apps=apps)
        create_permissions(app_config, verbosity=0, using=db, apps=apps)
        app_config.models_module = None

    for role, actions in ROLE_ACTIONS.items():
        group, _ = Group.objects.using(db).get_or_create(name=role)
        for model in _record_models(apps):
            content_type = ContentType.objects.db_manager(db).get_for_model(model)
            codenames = [f"{action}_{model._meta.model_name}" for action in actions]
            group.permissions.add(
                *Permission.objects.using(db).filter(
                    content_type=content_type, codename__in=codenames
                )
            )


def revoke_role_permissions(apps, schema_editor):
    """Take back exactly what was granted; the groups stay, as users may belong to them."""
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    ContentType = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    for role, actions in ROLE_ACTIONS.items():
        group = Group.objects.using(db).filter(name=role).first()
        if group is None:
            continue
        for model in _record_models(apps):
            content_type = ContentType.objects.db_manager(db).get_for_model(model)
            codenames = [f"{action}_{model._meta.model_name}" for action in actions]
            group.permissions.remove(
                *Permission.objects.using(db).filter(
                    content_type=content_type, codename__in=codenames
                )
            )


class Migration(migrations.Migration):
    dependencies = [
        ("policies", "0001_initial"),
        ("fleet", "0001_initial"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [migrations.RunPython(grant_role_permissions, revoke_role_permissions)]
