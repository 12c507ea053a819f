"""The pool's backoff between attempts to replace a lost connection is capped (db/connection.py):
psycopg_pool's own doubles without bound, and after a failover the pool went on waiting about as
long as the outage had lasted before it tried the promoted primary."""

from __future__ import annotations

from typing import Any

import pytest

from leasectl.db import connection
from leasectl.db.connection import _Pool, _Reconnect


def test_the_reconnection_backoff_grows_then_stays_at_its_cap() -> None:
    attempt = _Reconnect(timeout=365 * 86400)
    delays = []
    for _ in range(30):
        attempt.update_delay(now=0.0)
        delays.append(attempt.delay)
    assert delays[0] < delays[1] <= _Reconnect.MAX_DELAY
    assert max(delays) == _Reconnect.MAX_DELAY == delays[-1]


def test_a_database_pool_replaces_lost_connections_with_the_capped_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What the pool hands psycopg_pool when it must open a connection anew."""
    seen: list[Any] = []

    def record(self: Any, attempt: Any, growing: bool = False) -> None:
        seen.append(attempt)

    monkeypatch.setattr(connection.ConnectionPool, "_add_connection", record)
    pool = _Pool("host=127.0.0.1 port=1", open=False, reconnect_timeout=60)
    pool._add_connection(None)
    assert isinstance(seen[0], _Reconnect) and seen[0].timeout == 60
    given = _Reconnect(timeout=5)
    pool._add_connection(given)
    assert seen[1] is given
