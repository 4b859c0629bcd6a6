"""Two writers holding the same ETag: exactly one wins, the other gets 412.

The first writer is held inside its write (after its If-Match check) while the second
arrives. Without the row lock taken before the check, the second would pass the check too
(the first has not committed) and both would answer 200, one silently overwriting the other.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.test import APIClient

from controlplane.api import serializers as api_serializers
from controlplane.core.roles import POLICY_ADMIN
from controlplane.policies.models import Tenant
from tests.controlplane.api_harness import Records
from tests.controlplane.conftest import make_user

WAIT_S = 10.0


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_with_the_same_etag_cannot_both_win(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if connection.vendor != "postgresql":
        # The in-memory SQLite test database shares one cache between threads and answers
        # a second writer "table is locked" at once instead of waiting; PostgreSQL (CI runs
        # the suite on both) exercises the row lock for real.
        pytest.skip("needs a database with row locks and blocking writers")
    admin = make_user("admin-user", POLICY_ADMIN)
    tenant = Records().tenant()
    url = f"/api/tenants/{tenant.pk}/"
    etag = tenant.etag

    first_inside = threading.Event()
    release_first = threading.Event()
    real_save = api_serializers.tenant_save

    def held_save(**kwargs: Any) -> Tenant:
        if threading.current_thread().name == "first":
            first_inside.set()
            release_first.wait(WAIT_S)
        return real_save(**kwargs)

    monkeypatch.setattr(api_serializers, "tenant_save", held_save)
    statuses: dict[str, int] = {}

    def write(user: User, name: str) -> None:
        client = APIClient()
        client.force_authenticate(user=user)
        try:
            response = client.patch(url, {"display_name": name}, format="json", HTTP_IF_MATCH=etag)
            statuses[name] = response.status_code
        finally:
            connection.close()

    first = threading.Thread(target=write, args=(admin, "first"), name="first")
    second = threading.Thread(target=write, args=(admin, "second"), name="second")
    first.start()
    try:
        assert first_inside.wait(WAIT_S)
        second.start()
        second.join(0.5)
        # The second writer waits on the first one's lock instead of racing past the check.
        assert second.is_alive()
    finally:
        release_first.set()
        first.join(WAIT_S)
        if second.ident is not None:
            second.join(WAIT_S)

    assert statuses == {"first": 200, "second": 412}
    tenant.refresh_from_db()
    assert (tenant.display_name, tenant.revision) == ("first", 2)
