"""Settings from the environment: production mode passes `check --deploy`, secrets are required."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from controlplane.core import conf as env

REPO = Path(__file__).resolve().parents[2]


def _manage(*args: str, extra_env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY"}}
    environment.update(extra_env)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_production_mode_passes_check_deploy_without_warnings() -> None:
    result = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        extra_env={
            "DEBUG": "false",
            "SECRET_KEY": secrets.token_urlsafe(60),
            "ALLOWED_HOSTS": "headroom.example.com",
        },
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "no issues" in result.stdout


def test_production_mode_refuses_to_start_without_secret_key() -> None:
    result = _manage("check", extra_env={"DEBUG": "false"})
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr


def test_env_helpers_fail_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEADROOM_X", "maybe")
    with pytest.raises(ImproperlyConfigured, match="HEADROOM_X must be a boolean"):
        env.envbool("HEADROOM_X", False)
    monkeypatch.setenv("HEADROOM_X", "ten")
    with pytest.raises(ImproperlyConfigured, match="HEADROOM_X must be a whole number"):
        env.envint("HEADROOM_X", 1)
    monkeypatch.setenv("HEADROOM_X", "a, b,,c")
    assert env.envlist("HEADROOM_X", []) == ["a", "b", "c"]
    monkeypatch.setenv("HEADROOM_X", "off")
    assert env.envbool("HEADROOM_X", True) is False
    monkeypatch.setenv("HEADROOM_X", "0")
    with pytest.raises(ImproperlyConfigured, match="HEADROOM_X must be at least 1"):
        env.envint("HEADROOM_X", 5, minimum=1)
    monkeypatch.setenv("HEADROOM_X", "10.0.0.0/8, 192.0.2.7,2001:db8::/32")
    assert [str(n) for n in env.envnetworks("HEADROOM_X", [])] == [
        "10.0.0.0/8",
        "192.0.2.7/32",
        "2001:db8::/32",
    ]
    monkeypatch.setenv("HEADROOM_X", "10.0.0.0/8,proxy.internal")
    with pytest.raises(ImproperlyConfigured, match="HEADROOM_X must list IP addresses"):
        env.envnetworks("HEADROOM_X", [])
