"""Print generated values for Headroom's secrets, one ``KEY=value`` per line.

    python3 deploy/make_secrets.py > headroom-secrets.env          # Kubernetes (see README)
    python3 deploy/make_secrets.py --database-host postgres:5432 > deploy/.env   # compose

Run once per installation and keep the output out of version control: PostgreSQL takes its
password from the first start, so regenerating it later locks the control plane out.
"""

from __future__ import annotations

import argparse
import secrets
import sys


def secret_lines(*, database_host: str, database: str = "headroom", user: str = "headroom") -> str:
    """The three keys every Headroom process and PostgreSQL read, freshly generated."""
    password = secrets.token_urlsafe(32)
    return (
        f"SECRET_KEY={secrets.token_urlsafe(60)}\n"
        f"POSTGRES_PASSWORD={password}\n"
        f"DATABASE_URL=postgres://{user}:{password}@{database_host}/{database}\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--database-host",
        default="postgres.headroom.svc:5432",
        help="host:port of PostgreSQL as the processes reach it (default: the cluster Service)",
    )
    args = parser.parse_args(argv)
    sys.stdout.write(secret_lines(database_host=args.database_host))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
