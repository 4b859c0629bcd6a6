"""Fixtures of the browser tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def _fast_password_hasher(settings: Any) -> None:
    """Creating and logging in users with the production hasher costs seconds each."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
