"""Fixtures shared by control-plane tests: one user per role, and API clients for each."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from rest_framework.test import APIClient

from controlplane.core.roles import FINANCE, POLICY_ADMIN, ROLES, VIEWER


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings):  # type: ignore[no-untyped-def]
    """Creating users with the production hasher costs seconds per test."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def make_user(username: str, *roles: str, staff: bool = False) -> User:
    user = User.objects.create_user(username=username, password="pw-" + username, is_staff=staff)
    for role in roles:
        group, _ = Group.objects.get_or_create(name=role)
        user.groups.add(group)
    return user


@pytest.fixture
def role_users(db: None) -> dict[str, User | None]:
    """A user per role, plus one with no role and the anonymous user (None)."""
    return {
        POLICY_ADMIN: make_user("admin-user", POLICY_ADMIN, staff=True),
        FINANCE: make_user("finance-user", FINANCE),
        VIEWER: make_user("viewer-user", VIEWER),
        "no-role": make_user("no-role-user"),
        "anonymous": None,
    }


@pytest.fixture
def api_client_for(role_users: dict[str, User | None]):  # type: ignore[no-untyped-def]
    """``api_client_for(role)`` returns an APIClient authenticated as that role's user."""

    def _client(role: str) -> APIClient:
        client = APIClient()
        user = role_users[role]
        if user is not None:
            client.force_authenticate(user=user)
        return client

    return _client


__all__ = ["ROLES", "make_user"]
