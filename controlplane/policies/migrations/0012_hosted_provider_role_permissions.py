"""The role groups' permissions on the hosted-provider records (``fleet.HostedProvider``):
``policy-admin`` edits them, ``finance`` and ``viewer`` view them, as for every fleet record
(``0002_role_groups``, whose functions grant and revoke for every fleet and policy model
the migration state holds, and take nothing twice)."""

from importlib import import_module

from django.db import migrations

role_groups = import_module("controlplane.policies.migrations.0002_role_groups")


class Migration(migrations.Migration):
    dependencies = [
        ("policies", "0011_tier_hosted_overflow"),
        ("fleet", "0009_hosted_provider"),
    ]

    operations = [
        migrations.RunPython(
            role_groups.grant_role_permissions, migrations.RunPython.noop, elidable=False
        ),
    ]
