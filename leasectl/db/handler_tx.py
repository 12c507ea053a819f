"""A handler's own transaction that ends with its job's fenced completion (``ctx.transaction()``).

The handler's writes and ``job_complete_in_transaction`` commit together or not at all. Each
handler thread that asks gets its own connection, opened on first use and kept outside the
worker's pool: a handler that holds a transaction open for long never takes a connection the
dispatcher or the heartbeat needs, and handlers that never ask open none.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg

from leasectl.core.errors import LeaseLost
from leasectl.core.models import Lease
from leasectl.db import sql as queries
from leasectl.db.connection import CONNECT_TIMEOUT_S, Database, read_only


class HandlerTransactions:
    """One connection per handler thread (opened when first asked), each for one transaction at
    a time; all closed with the database."""

    def __init__(self, db: Database, application_name: str) -> None:
        self._db = db
        self._application_name = application_name[:63]
        self._local = threading.local()
        self._lock = threading.Lock()
        self._open: list[psycopg.Connection[Any]] = []
        self._busy: set[int] = set()  # ids of the connections inside a transaction now
        self._closed = False
        self._complete = queries.get("job_complete_in_transaction").render(db.schema)
        db.on_close(self.close)

    def _connection(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        if conn is not None:
            self._forget(conn)
        with self._db.errors():
            # autocommit: the transaction is psycopg's `conn.transaction()` block, inside which
            # an explicit commit() or rollback() by the handler is refused.
            conn = psycopg.connect(
                self._db.dsn,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_S,
                application_name=self._application_name,
            )
        with self._lock:
            if self._closed:
                conn.close()
                raise LeaseLost("the worker has shut down: its leases were handed back")
            self._open.append(conn)
        self._local.conn = conn
        return conn

    def _forget(self, conn: psycopg.Connection[Any]) -> None:
        conn.close()
        with self._lock:
            if conn in self._open:
                self._open.remove(conn)
        self._local.conn = None

    @contextlib.contextmanager
    def completing(
        self, lease: Lease, before_completion: Callable[[], None]
    ) -> Iterator[psycopg.Connection[Any]]:
        """A connection in an open transaction; on a normal exit the lease's fenced completion
        runs in that transaction, which then commits. Raises ``LeaseLost`` (rolled back) when
        the fence refuses, a mapped ``LeasectlError`` when the completion or the commit fails
        (committed or not: a fenced failure written next is refused if it was), and lets an
        exception from the block propagate (rolled back)."""
        conn = self._connection()
        params = {"id": lease.job_id, "attempt": lease.attempt, "owner": lease.owner}
        body_done = False
        with self._lock:
            self._busy.add(id(conn))
        try:
            with conn.transaction():
                yield conn
                body_done = True
                before_completion()
                if conn.execute(self._complete, params).fetchone() is None:
                    raise _Refused
        except _Refused:
            raise LeaseLost(
                f"job {lease.job_id} attempt {lease.attempt}: the lease was lost; "
                "the transaction was rolled back"
            ) from None
        except psycopg.Error as exc:
            if conn.broken or conn.closed or read_only(exc):
                self._forget(conn)
            if not body_done:
                raise  # the handler's own error, for it to see as it is
            with self._db.errors():
                raise exc from None
        except BaseException:
            if conn.broken or conn.closed:
                self._forget(conn)
            raise
        finally:
            with self._lock:
                self._busy.discard(id(conn))
                closing = self._closed
            if closing:  # closed meanwhile: this thread closes its own connection
                self._forget(conn)

    def close(self) -> None:
        """Close the connections no transaction is using; one in use is closed by its own
        thread when its transaction ends (libpq connections are not for two threads at once)."""
        with self._lock:
            self._closed = True
            idle = [c for c in self._open if id(c) not in self._busy]
            self._open = [c for c in self._open if id(c) in self._busy]
        for conn in idle:
            conn.close()


class _Refused(Exception):
    """The fence refused the completion (raised inside the transaction to roll it back)."""
