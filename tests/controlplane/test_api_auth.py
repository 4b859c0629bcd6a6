"""Token and session authentication, and who the audit trail names under each."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache
from django.http import HttpRequest
from django.test import override_settings
from rest_framework.test import APIClient

from controlplane.policies.models import Tier
from tests.controlplane.api_harness import APITest

TOKEN_URL = "/api/auth/token/"


class TestTokens(APITest):
    @pytest.fixture(autouse=True)
    def _fresh_throttle(self) -> Any:
        cache.clear()  # the token throttle counts requests per address in the cache
        yield
        cache.clear()

    def _token(self, username: str) -> str:
        response = APIClient().post(
            TOKEN_URL, {"username": username, "password": f"pw-{username}"}, format="json"
        )
        assert response.status_code == 200, response.json()
        token: str = response.json()["token"]
        return token

    def test_token_grants_the_users_roles(self, role_users: Any) -> None:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {self._token('viewer-user')}")
        assert client.get("/api/tenants/").status_code == 200
        assert client.post("/api/geographies/", {"name": "eu"}, format="json").status_code == 403

    def test_token_is_stable_until_revoked(self, role_users: Any) -> None:
        first = self._token("admin-user")
        assert self._token("admin-user") == first
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {first}")
        assert client.delete(TOKEN_URL).status_code == 204
        revoked = client.get("/api/tenants/")
        assert revoked.status_code == 401
        assert revoked.json()["error"]["code"] == "authentication_failed"
        assert self._token("admin-user") != first

    def test_wrong_password_is_400_in_the_error_contract(self, role_users: Any) -> None:
        response = APIClient().post(
            TOKEN_URL, {"username": "admin-user", "password": "guess"}, format="json"
        )
        assert response.status_code == 400
        assert "non_field_errors" in response.json()["error"]["fields"]

    def test_missing_or_bad_token_is_401_with_challenge(self, role_users: Any) -> None:
        anonymous = APIClient().get("/api/tenants/")
        assert anonymous.status_code == 401
        assert anonymous["WWW-Authenticate"] == "Token"
        assert anonymous.json()["error"]["code"] == "not_authenticated"
        forged = APIClient()
        forged.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
        assert forged.get("/api/tenants/").status_code == 401
        assert APIClient().delete(TOKEN_URL).status_code == 401

    @override_settings(AXES_ENABLED=False)
    def test_token_requests_are_rate_limited_per_address(self, role_users: Any) -> None:
        # The rate limit on its own (the lockout, tested in test_login_lockout.py, stops a
        # guesser sooner): the 21st request in a minute is refused whatever it carries.
        client = APIClient()
        statuses = [
            client.post(
                TOKEN_URL,
                {"username": "admin-user", "password": "guess"},
                HTTP_X_FORWARDED_FOR=f"198.51.100.{i}",
            ).status_code
            for i in range(21)
        ]
        assert statuses[:20] == [400] * 20
        assert statuses[20] == 429

    def test_token_auth_change_is_attributed_to_the_token_user(self, role_users: Any) -> None:
        tier = self.records.tier()
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {self._token('admin-user')}")
        response = client.patch(
            f"/api/tiers/{tier.pk}/", {"priority": 7}, format="json", HTTP_IF_MATCH=tier.etag
        )
        assert response.status_code == 200
        newest = Tier.history.filter(id=tier.pk).latest("history_id")
        assert newest.history_user is not None
        assert newest.history_user.username == "admin-user"


class TestSessions(APITest):
    def test_session_login_reads_and_writes_with_csrf(self, role_users: Any) -> None:
        client = APIClient(enforce_csrf_checks=True)
        assert client.login(request=HttpRequest(), username="admin-user", password="pw-admin-user")
        assert client.get("/api/geographies/").status_code == 200
        refused = client.post("/api/geographies/", {"name": "eu"}, format="json")
        assert refused.status_code == 403
        assert "CSRF" in refused.json()["error"]["message"]

    def test_session_change_is_attributed_to_the_session_user(self, role_users: Any) -> None:
        client = APIClient()
        assert client.login(request=HttpRequest(), username="admin-user", password="pw-admin-user")
        created = client.post("/api/geographies/", {"name": "ap"}, format="json")
        assert created.status_code == 201
        history = client.get(f"/api/geographies/{created.json()['id']}/history/").json()
        assert history["results"][0]["user"] == "admin-user"
        assert history["results"][0]["kind"] == "created"
