"""``manage.py tenant_key create|list|revoke``: tenant keys for operators and scripts.

``create --tenant NAME --name LABEL [--expires-days N] [--read-only] [--by USERNAME]
[--quiet]`` prints the new key once (``--quiet``: the key alone, for a script:
``KEY=$(manage.py tenant_key create --tenant acme --name ci --quiet)``); ``list [--tenant
NAME]`` prints the keys (never a secret); ``revoke PREFIX`` revokes one.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from controlplane.access import selectors, services
from controlplane.policies.models import Tenant


class Command(BaseCommand):
    help = "Make, list or revoke tenant keys (Authorization: Bearer <key>; docs/api.md)."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="verb", required=True)
        create = sub.add_parser("create", help="make a key and print it (once)")
        create.add_argument("--tenant", required=True, help="tenant name")
        create.add_argument("--name", required=True, help="what the key is for")
        create.add_argument("--expires-days", type=int, default=None, help="expire after N days")
        create.add_argument("--read-only", action="store_true", help="refuse the key's writes")
        create.add_argument("--by", default=None, help="username recorded as the creator")
        create.add_argument("--quiet", action="store_true", help="print the key alone")
        listing = sub.add_parser("list", help="list keys (prefix, tenant, state, last use)")
        listing.add_argument("--tenant", default=None, help="one tenant's keys")
        revoke = sub.add_parser("revoke", help="revoke a key by its prefix")
        revoke.add_argument("prefix", help="the key's prefix, e.g. hr_ab12cd34")
        revoke.add_argument("--by", default=None, help="username recorded as the revoker")

    def handle(self, *args: Any, **options: Any) -> None:
        verb = options["verb"]
        if verb == "create":
            self._create(options)
        elif verb == "list":
            self._list(options)
        else:
            self._revoke(options)

    @staticmethod
    def _user(username: str | None) -> User | None:
        if username is None:
            return None
        user = User.objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"--by: no user {username!r}.")
        return user

    def _create(self, options: dict[str, Any]) -> None:
        tenant = Tenant.objects.filter(name=options["tenant"]).first()
        if tenant is None:
            raise CommandError(f"--tenant: no tenant {options['tenant']!r}.")
        days = options["expires_days"]
        if days is not None and days < 1:
            raise CommandError("--expires-days: give a whole number of days, at least 1.")
        try:
            issued = services.tenant_key_create(
                tenant=tenant,
                name=options["name"],
                created_by=self._user(options["by"]),
                expires_at=timezone.now() + timedelta(days=days) if days else None,
                read_only=options["read_only"],
            )
        except ValidationError as exc:
            raise CommandError(
                "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items())
            ) from exc
        if options["quiet"]:
            self.stdout.write(issued.key)
            return
        self.stdout.write(
            f"Tenant key {issued.record.prefix} for {tenant.name} ({issued.record.name}):"
        )
        self.stdout.write(issued.key)
        self.stdout.write("Shown only now: store it, or revoke the key if it is lost.")

    def _list(self, options: dict[str, Any]) -> None:
        rows = selectors.tenant_key_list(tenant=options["tenant"])
        self.stdout.write(f"{'prefix':<12} {'tenant':<20} {'name':<24} {'state':<8} last used")
        for key in rows:
            used = key.last_used_at.isoformat(timespec="minutes") if key.last_used_at else "never"
            self.stdout.write(
                f"{key.prefix:<12} {key.tenant.name:<20} {key.name:<24} {key.state:<8} {used}"
            )

    def _revoke(self, options: dict[str, Any]) -> None:
        key = selectors.tenant_key_by_prefix(prefix=options["prefix"])
        if key is None:
            raise CommandError(f"No tenant key {options['prefix']!r}.")
        already = key.revoked_at is not None
        key = services.tenant_key_revoke(key=key, user=self._user(options["by"]))
        self.stdout.write(f"{key.prefix} {'was already' if already else 'is now'} revoked.")
