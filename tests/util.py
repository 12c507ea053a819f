"""Polling helpers: wait for a condition with a deadline instead of sleeping."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg

T = TypeVar("T")


def wait_until(
    predicate: Callable[[], T], *, timeout: float = 20.0, interval: float = 0.02, what: str = ""
) -> T:
    """Return the first truthy value of ``predicate()``; fail the test after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}")
        time.sleep(interval)


def wait_for_lock_wait(conn: psycopg.Connection[Any], *, what: str) -> None:
    """Wait until exactly one session of ``conn``'s database waits on a lock."""
    wait_until(
        lambda: (
            conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE wait_event_type = 'Lock' AND datname = current_database()"
            ).fetchone()
            == (1,)
        ),
        what=what,
    )
