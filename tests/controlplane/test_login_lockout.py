"""Password guessing is stopped on every login path, keyed on the real client address, and
cannot be used to lock a user out.

The admin login, the API's session login and the token endpoint share one lockout
(django-axes, by username and address together): after ``AXES_FAILURE_LIMIT`` failures for one
username from one client address, that pair is refused with 429 and ``Retry-After``, the right
password included; the same user from another address still logs in. Slower rates
(``controlplane.core.clients``) stop guessing one username from many addresses and spraying
many usernames from one address, refusing only the addresses that failed.
``X-Forwarded-For`` names the client only when the peer is a trusted proxy.
"""

from __future__ import annotations

import io
import ipaddress
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from axes.models import AccessAttempt, AccessFailureLog
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client, RequestFactory, override_settings
from django.utils import timezone
from rest_framework.test import APIClient

from controlplane.core.clients import client_address

TOKEN_URL = "/api/auth/token/"
ADMIN_LOGIN = "/admin/login/"
API_LOGIN = "/api/auth/login/"
LIMIT = 5
PROXY = "10.0.0.7"
TRUSTING_THE_PROXY = override_settings(
    HEADROOM_TRUSTED_PROXIES=(ipaddress.ip_network("10.0.0.0/24"),)
)


@pytest.fixture(autouse=True)
def _fresh_counters(db: None) -> Iterator[None]:
    cache.clear()  # the token endpoint's rate limit counts in the cache
    yield
    cache.clear()


def token_attempt(password: str, username: str = "admin-user", **meta: str) -> Any:
    return APIClient().post(TOKEN_URL, {"username": username, "password": password}, **meta)


def form_attempt(url: str, password: str, username: str = "admin-user", **meta: str) -> Any:
    return Client().post(url, {"username": username, "password": password}, **meta)


Attempt = Callable[..., Any]
PATHS: dict[str, Attempt] = {
    "token": token_attempt,
    "admin": lambda password, **kw: form_attempt(ADMIN_LOGIN, password, **kw),
    "api-session": lambda password, **kw: form_attempt(API_LOGIN, password, **kw),
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_the_right_password_is_refused_after_the_limit(path: str, role_users: Any) -> None:
    attempt = PATHS[path]
    for _ in range(LIMIT - 1):
        assert attempt("guess").status_code in (200, 400)  # the form again, or 400
    assert attempt("guess").status_code == 429  # the failure that reaches the limit
    locked = attempt("pw-admin-user")
    assert locked.status_code == 429
    assert int(locked["Retry-After"]) == 15 * 60


def test_the_api_lockout_speaks_the_error_contract(role_users: Any) -> None:
    for _ in range(LIMIT):
        token_attempt("guess")
    body = token_attempt("pw-admin-user").json()
    assert body["error"]["code"] == "locked_out"
    assert "try again in 900 seconds" in body["error"]["message"]


def test_one_lockout_covers_every_login_path(role_users: Any) -> None:
    for _ in range(2):
        token_attempt("guess")
    for _ in range(2):
        form_attempt(ADMIN_LOGIN, "guess")
    form_attempt(API_LOGIN, "guess")
    assert token_attempt("pw-admin-user").status_code == 429


def test_forged_forwarded_for_does_not_buy_more_guesses(role_users: Any) -> None:
    # No trusted proxy: the header is the client's own word, so every guess counts against
    # the peer address.
    statuses = [
        token_attempt("guess", HTTP_X_FORWARDED_FOR=f"198.51.100.{i}").status_code
        for i in range(30)
    ]
    assert statuses[: LIMIT - 1] == [400] * (LIMIT - 1)
    assert set(statuses[LIMIT - 1 :]) == {429}
    assert token_attempt("pw-admin-user", HTTP_X_FORWARDED_FOR="198.51.100.99").status_code == 429


ATTACKER = {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": "203.0.113.1"}
REAL_USER = {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": "203.0.113.2"}


@TRUSTING_THE_PROXY
@pytest.mark.parametrize("path", sorted(PATHS))
def test_an_attacker_locks_out_only_itself(path: str, role_users: Any) -> None:
    """The review's attack: five wrong passwords for a user from one address. The attacker's
    address is locked out for that user on every path; the user, elsewhere, logs in."""
    for _ in range(LIMIT):
        PATHS[path]("guess", **ATTACKER)
    for attempt in PATHS.values():
        assert attempt("pw-admin-user", **ATTACKER).status_code == 429
    assert token_attempt("pw-admin-user", **REAL_USER).status_code == 200
    # The session logins redirect to the next page on success.
    assert form_attempt(ADMIN_LOGIN, "pw-admin-user", **REAL_USER).status_code == 302
    assert form_attempt(API_LOGIN, "pw-admin-user", **REAL_USER).status_code == 302


@TRUSTING_THE_PROXY
def test_behind_a_trusted_proxy_each_client_has_its_own_count(role_users: Any) -> None:
    for _ in range(LIMIT):
        token_attempt("guess", **ATTACKER)
    assert token_attempt("pw-admin-user", **ATTACKER).status_code == 429
    assert token_attempt("pw-admin-user", **REAL_USER).status_code == 200
    # The lockout is the pair's: another user at the attacker's address is not locked out.
    assert token_attempt("pw-viewer-user", username="viewer-user", **ATTACKER).status_code == 200


def _address(i: int) -> dict[str, str]:
    return {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": f"203.0.113.{i}"}


@TRUSTING_THE_PROXY
def test_guessing_one_username_from_many_addresses_slows_to_one_guess_an_hour_per_address(
    role_users: Any, settings: Any
) -> None:
    settings.HEADROOM_LOGIN_USERNAME_FAILURES = 20
    # Twenty addresses, one guess each: under the lockout's five per address, at the
    # per-username limit.
    for i in range(10, 30):
        assert token_attempt("guess", **_address(i)).status_code == 400
    # Each address that guessed is refused now, even with the right password, for an hour
    # from its guess...
    refused = token_attempt("pw-admin-user", **_address(10))
    assert refused.status_code == 429
    assert 3500 < int(refused["Retry-After"]) <= 3600
    assert "for this user" in refused.json()["error"]["message"]
    # ... while the user, from an address that never failed, logs in,
    assert token_attempt("pw-admin-user", **_address(200)).status_code == 200
    assert form_attempt(ADMIN_LOGIN, "pw-admin-user", **_address(201)).status_code == 302
    # a new guessing address gets one guess, then waits,
    assert token_attempt("guess", **_address(202)).status_code == 400
    assert token_attempt("guess", **_address(202)).status_code == 429
    # and other users are not slowed at all.
    assert (
        token_attempt("pw-viewer-user", username="viewer-user", **_address(10)).status_code == 200
    )
    # An hour after its last failure an address may try again.
    AccessFailureLog.objects.filter(ip_address="203.0.113.10").update(
        attempt_time=timezone.now() - timedelta(minutes=61)
    )
    assert token_attempt("pw-admin-user", **_address(10)).status_code == 200


@TRUSTING_THE_PROXY
def test_below_the_per_username_rate_nothing_is_slowed(role_users: Any, settings: Any) -> None:
    settings.HEADROOM_LOGIN_USERNAME_FAILURES = 20
    for i in range(10, 29):  # nineteen failures: one short of the limit
        token_attempt("guess", **_address(i))
    assert token_attempt("pw-admin-user", **_address(10)).status_code == 200


@TRUSTING_THE_PROXY
def test_spraying_usernames_from_one_address_refuses_that_address(
    role_users: Any, settings: Any
) -> None:
    settings.HEADROOM_LOGIN_ADDRESS_FAILURES = 12
    for i in range(12):  # one guess each for twelve usernames
        assert token_attempt("guess", username=f"user-{i}", **ATTACKER).status_code == 400
    refused = token_attempt("pw-viewer-user", username="viewer-user", **ATTACKER)
    assert refused.status_code == 429
    assert "from this address" in refused.json()["error"]["message"]
    assert token_attempt("pw-viewer-user", username="viewer-user", **REAL_USER).status_code == 200


@TRUSTING_THE_PROXY
def test_an_administrator_can_lift_the_slower_rates(role_users: Any, settings: Any) -> None:
    settings.HEADROOM_LOGIN_USERNAME_FAILURES = 3
    for i in range(10, 13):
        token_attempt("guess", **_address(i))
    assert token_attempt("pw-admin-user", **_address(10)).status_code == 429
    call_command("axes_reset_failure_logs", "--age", "0", stdout=io.StringIO())
    assert token_attempt("pw-admin-user", **_address(10)).status_code == 200


def test_the_rates_read_the_failure_log_of_every_login_path(role_users: Any) -> None:
    form_attempt(ADMIN_LOGIN, "guess")
    form_attempt(API_LOGIN, "guess")
    token_attempt("guess")
    assert AccessFailureLog.objects.filter(username="admin-user").count() == 3


def test_a_success_before_the_limit_starts_the_count_again(role_users: Any) -> None:
    for _ in range(LIMIT - 1):
        token_attempt("guess")
    assert token_attempt("pw-admin-user").status_code == 200
    for _ in range(LIMIT - 1):
        token_attempt("guess")
    assert token_attempt("pw-admin-user").status_code == 200


def test_the_lockout_ends_after_the_cool_off(role_users: Any) -> None:
    for _ in range(LIMIT):
        token_attempt("guess")
    assert token_attempt("pw-admin-user").status_code == 429
    # Sixteen minutes later (moved in the records rather than waited for).
    for row in AccessAttempt.objects.all():
        row.attempt_time -= timedelta(minutes=16)
        row.save(update_fields=["attempt_time"])
    assert token_attempt("pw-admin-user").status_code == 200


def test_an_administrator_can_lift_the_lockout(role_users: Any) -> None:
    for _ in range(LIMIT):
        token_attempt("guess")
    assert token_attempt("pw-admin-user").status_code == 429
    call_command("axes_reset", verbosity=0)
    assert token_attempt("pw-admin-user").status_code == 200


class TestClientAddress:
    proxies = (ipaddress.ip_network("10.0.0.0/24"), ipaddress.ip_network("2001:db8::/32"))

    def address(self, remote: str, forwarded: str | None = None) -> str:
        meta = {"REMOTE_ADDR": remote}
        if forwarded is not None:
            meta["HTTP_X_FORWARDED_FOR"] = forwarded
        return client_address(RequestFactory().get("/", **meta), self.proxies)

    def test_a_direct_client_is_its_peer_address_whatever_it_forwards(self) -> None:
        assert self.address("198.51.100.4", "203.0.113.9") == "198.51.100.4"

    def test_behind_a_trusted_proxy_the_forwarded_client(self) -> None:
        assert self.address("10.0.0.7", "203.0.113.9") == "203.0.113.9"

    def test_the_rightmost_untrusted_hop_wins_over_what_the_client_wrote(self) -> None:
        # The client wrote "1.2.3.4"; our proxy appended the address it really heard from.
        assert self.address("10.0.0.7", "1.2.3.4, 203.0.113.9, 10.0.0.3") == "203.0.113.9"

    def test_ports_and_ipv6(self) -> None:
        assert self.address("10.0.0.7", "203.0.113.9:5123") == "203.0.113.9"
        assert self.address("2001:db8::1", "[2001:db9::5]:443") == "2001:db9::5"

    def test_an_unreadable_chain_leaves_the_peer(self) -> None:
        assert self.address("10.0.0.7", "not-an-address") == "10.0.0.7"
        assert self.address("10.0.0.7", "") == "10.0.0.7"
        assert self.address("10.0.0.7", "10.0.0.8") == "10.0.0.7"
