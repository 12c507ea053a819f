"""A primary and its streaming standby of embedded servers (db/embedded/replication.py).

These start their own pair even when LEASECTL_TEST_DSN is set: a standby needs a primary whose
files we own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from leasectl.db.embedded import EmbeddedServer
from leasectl.db.embedded.replication import (
    application_name,
    in_recovery,
    kill_primary,
    make_standby,
    multi_host_dsn,
    promote,
    replicated_pair,
    wait_caught_up,
    wait_streaming,
)

pytestmark = [pytest.mark.slow, pytest.mark.full, pytest.mark.serial]

Pair = tuple[EmbeddedServer, EmbeddedServer]


@pytest.fixture
def sync_pair() -> Iterator[Pair]:
    with replicated_pair(synchronous=True) as pair:
        yield pair


def execute(dsn: str, query: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query.encode(), params)
        return cur.fetchall() if cur.description else []


def replication_row(primary: EmbeddedServer, standby: EmbeddedServer) -> tuple[Any, ...]:
    rows = execute(
        primary.dsn(),
        "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = %s",
        [application_name(standby)],
    )
    assert len(rows) == 1
    return rows[0]


def test_a_write_on_the_primary_is_readable_on_the_standby(sync_pair: Pair) -> None:
    primary, standby = sync_pair
    assert not in_recovery(primary)
    assert in_recovery(standby)
    assert replication_row(primary, standby) == ("streaming", "sync")
    assert execute(primary.dsn(), "SHOW synchronous_commit") == [("on",)]
    execute(primary.dsn(), "CREATE TABLE kept (v text)")
    execute(primary.dsn(), "INSERT INTO kept VALUES (%s)", ["written on the primary"])
    wait_caught_up(primary, standby, timeout=10)
    assert execute(standby.dsn(), "SELECT v FROM kept") == [("written on the primary",)]


def test_the_standby_refuses_writes_until_promoted(sync_pair: Pair) -> None:
    primary, standby = sync_pair
    execute(primary.dsn(), "CREATE TABLE kept (v text)")
    wait_caught_up(primary, standby, timeout=10)
    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        execute(standby.dsn(), "INSERT INTO kept VALUES ('refused')")
    kill_primary(primary)
    assert not primary.is_running()
    promote(standby)
    assert not in_recovery(standby)
    execute(standby.dsn(), "INSERT INTO kept VALUES ('promoted')")
    assert execute(standby.dsn(), "SELECT v FROM kept") == [("promoted",)]
    # Promoted, it waits for no synchronous standby of its own: the commit above returned.
    assert execute(standby.dsn(), "SHOW synchronous_standby_names") == [("",)]


def test_a_multi_host_dsn_follows_the_primary(sync_pair: Pair) -> None:
    primary, standby = sync_pair
    dsn = multi_host_dsn(standby, primary)  # the standby first: libpq must skip it
    assert "target_session_attrs=read-write" in dsn
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.info.port == primary.port
    kill_primary(primary)
    promote(standby)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.info.port == standby.port
        conn.execute("CREATE TABLE after_failover (v int)")


def test_a_new_standby_is_seeded_from_the_promoted_primary(sync_pair: Pair) -> None:
    """A failover, then a new asynchronous standby of the promoted one, which replicates."""
    primary, standby = sync_pair
    kill_primary(primary)
    promote(standby)
    execute(standby.dsn(), "CREATE TABLE kept (v text)")
    execute(standby.dsn(), "INSERT INTO kept VALUES ('before the new standby')")
    third = make_standby(standby, primary.base_dir.parent / "third", synchronous=False)
    wait_streaming(standby, third, timeout=10)
    assert replication_row(standby, third) == ("streaming", "async")
    execute(standby.dsn(), "INSERT INTO kept VALUES ('after')")
    wait_caught_up(standby, third, timeout=10)
    assert execute(third.dsn(), "SELECT v FROM kept ORDER BY v") == [
        ("after",),
        ("before the new standby",),
    ]
