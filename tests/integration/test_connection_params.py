"""Every leasectl connection pins its search_path and sets TCP keepalives and a TCP user timeout:
read back from the sockets themselves and from the server."""

from __future__ import annotations

import socket
from typing import Any

import psycopg
from psycopg import conninfo

from leasectl.db.connection import Database
from leasectl.db.handler_tx import HandlerTransactions
from leasectl.db.session import KEEPALIVE_DEFAULTS
from leasectl.db.work import WorkerStore
from leasectl.runtime.worker import WorkerConfig, worker_store

SCHEMA = "leasectl"


def tcp(dsn: str) -> str:
    """The DSN over TCP (a Unix socket has no keepalives)."""
    params = conninfo.conninfo_to_dict(dsn)
    if str(params.get("host", "")).startswith("/") or not params.get("host"):
        return conninfo.make_conninfo(dsn, host="127.0.0.1")
    return dsn


def settings(conn: psycopg.Connection[Any]) -> dict[str, int | str]:
    sock = socket.socket(fileno=conn.fileno())
    try:
        return {
            "search_path": str(conn.execute("SHOW search_path").fetchone()[0]),  # type: ignore[index]
            "keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            "count": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            "user_timeout": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        }
    finally:
        sock.detach()  # the fd stays libpq's


DEFAULTS = {
    "search_path": "pg_catalog,pg_temp",
    "keepalive": 1,
    "idle": int(KEEPALIVE_DEFAULTS["keepalives_idle"]),
    "interval": int(KEEPALIVE_DEFAULTS["keepalives_interval"]),
    "count": int(KEEPALIVE_DEFAULTS["keepalives_count"]),
    "user_timeout": int(KEEPALIVE_DEFAULTS["tcp_user_timeout"]),
}


def test_pooled_hot_and_handler_connections_have_the_defaults(db_dsn: str) -> None:
    dsn = tcp(db_dsn)
    with Database.connect(dsn, SCHEMA) as db, db.connection() as conn:
        assert settings(conn) == DEFAULTS
    store: WorkerStore = worker_store(dsn, SCHEMA, WorkerConfig(queues=("q",)))
    try:
        hot = store.db.borrow()  # the hot path's connection: libpq calls on this socket
        try:
            assert settings(hot) == DEFAULTS
        finally:
            store.db.give_back(hot)
        tx = HandlerTransactions(store.db, "test")
        # The handler's own SQL runs on it: the application's search_path, not the pinned one.
        handler = settings(tx._connection())
        assert handler == {**DEFAULTS, "search_path": handler["search_path"]}
        assert handler["search_path"] != "pg_catalog,pg_temp"
    finally:
        store.db.close()


def test_the_dsns_own_parameters_and_options_win(db_dsn: str) -> None:
    dsn = conninfo.make_conninfo(
        tcp(db_dsn), keepalives_idle="7", tcp_user_timeout="9000", options="-c work_mem=5MB"
    )
    with Database.connect(dsn, SCHEMA) as db, db.connection() as conn:
        got = settings(conn)
        work_mem = conn.execute("SHOW work_mem").fetchone()
    assert got == {**DEFAULTS, "idle": 7, "user_timeout": 9000}
    assert work_mem == ("5MB",)


def test_a_search_path_in_the_dsn_is_overridden(db_dsn: str) -> None:
    """Pinned whatever the DSN says: the statements rely on it."""
    dsn = conninfo.make_conninfo(tcp(db_dsn), options="-c search_path=public")
    with Database.connect(dsn, SCHEMA) as db, db.connection() as conn:
        assert settings(conn)["search_path"] == "pg_catalog,pg_temp"
