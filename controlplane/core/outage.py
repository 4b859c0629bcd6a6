"""A dependency down: which errors mean the database or the broker cannot be reached, and how
long a client should wait before trying again.

Every part answers such an outage the same way: an API request gets 503 in the API's error
shape with ``Retry-After`` (``controlplane.api.errors`` for DRF views,
``controlplane.core.errors`` for the rest), ``/readyz`` answers 503 with the same header while
the database is unreachable (``controlplane.health``), and each is logged once, as a warning
naming the dependency.

``HEADROOM_RETRY_AFTER_S`` (30, from 1 to 3600): the seconds ``Retry-After`` names.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal, TypeVar

import kombu.exceptions
import psycopg
import redis.exceptions
from django.db import InterfaceError, OperationalError, connection

from controlplane.core.conf import setting_int

logger = logging.getLogger(__name__)

T = TypeVar("T")

Dependency = Literal["database", "broker"]

# A connection refused, reset or lost, a server shutting down, a statement cancelled or a
# deadlock: the database could not do the work now, and the same request may succeed later.
# (Django wraps the driver's errors in its own classes; the driver's are listed for code that
# talks to psycopg directly.)
DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    OperationalError,
    InterfaceError,
    psycopg.OperationalError,
    psycopg.InterfaceError,
)
# Publishing a task failed after kombu's own retries: the broker refused or dropped the
# connection.
BROKER_ERRORS: tuple[type[BaseException], ...] = (
    kombu.exceptions.OperationalError,
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
)

_MESSAGES: dict[Dependency, str] = {
    "database": "The database is unreachable; nothing was changed. Try again later.",
    "broker": (
        "The task queue (broker) is unreachable, so the work could not be queued. Try again later."
    ),
}


class DependencyUnavailable(Exception):
    """A dependency (the database or the broker) could not be reached; the request may be
    tried again after ``retry_after_s()``."""

    def __init__(self, dependency: Dependency, detail: str = "") -> None:
        super().__init__(detail or _MESSAGES[dependency])
        self.dependency: Dependency = dependency
        self.detail = detail

    @property
    def message(self) -> str:
        """What an API client is told (the detail, which may name hosts, is only logged)."""
        return _MESSAGES[self.dependency]


class BrokerUnavailable(DependencyUnavailable):
    """A task could not be sent: the broker is unreachable."""

    def __init__(self, detail: str = "") -> None:
        super().__init__("broker", detail)


def retry_after_s() -> int:
    """Seconds a client is asked to wait (``Retry-After``) while a dependency is down."""
    return setting_int("HEADROOM_RETRY_AFTER_S", 30, minimum=1, maximum=3600)


def dependency_down(exc: BaseException) -> Dependency | None:
    """The dependency ``exc`` says is down, or None when it is some other error."""
    if isinstance(exc, DependencyUnavailable):
        return exc.dependency
    if isinstance(exc, DATABASE_ERRORS):
        return "database"
    if isinstance(exc, BROKER_ERRORS):
        return "broker"
    return None


def dependency_message(exc: BaseException) -> str:
    """The message an API client gets for the outage ``exc`` names."""
    dependency = dependency_down(exc)
    return _MESSAGES[dependency] if dependency is not None else str(exc)


def log_outage(exc: BaseException, what: str) -> None:
    """One warning line: which dependency, what could not be done, the error."""
    logger.warning(
        "%s unavailable while %s: %s: %s",
        dependency_down(exc) or "a dependency",
        what,
        type(exc).__name__,
        exc,
    )


def on_fresh_connection(write: Callable[[], T]) -> T:
    """Run ``write`` (a short write outside any transaction), and once more on a new database
    connection if the first attempt found the connection broken.

    A worker keeps its connection across a task; after the database restarts that connection is
    dead, and Django does not reconnect in the middle of a task. Recording a job's failure must
    not fail for that reason: the dead connection is closed (Django opens a new one on the next
    query) and the write is tried again. Inside a transaction nothing is retried (the
    transaction is lost with its connection). Still failing: raised, and the recovery sweep
    reports the job later.
    """
    try:
        return write()
    except DATABASE_ERRORS:
        if connection.in_atomic_block:
            raise
        connection.close()
        return write()
