"""A handler's own transaction that ends with its job's fenced completion (``ctx.transaction()``).

The handler's writes and ``job_complete_in_transaction`` commit together or not at all. Each
handler thread that asks gets its own connection, opened on first use and kept outside the
worker's pool: a handler that holds a transaction open for long never takes a connection the
dispatcher or the heartbeat needs, and handlers that never ask open none. Async handlers
(``async with ctx.transaction()``) get an ``AsyncConnection`` from ``AsyncHandlerTransactions``,
a small set of them kept by the worker's event loop (one per transaction open at once).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import psycopg

from leasectl.core.errors import LeaseLost
from leasectl.core.models import Lease
from leasectl.db import sql as queries
from leasectl.db.connection import Database, read_only
from leasectl.db.session import session_kwargs


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
                **session_kwargs(
                    self._db.dsn,
                    application_name=self._application_name,
                    pin_search_path=False,  # the handler's own SQL runs here
                ),
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
                _still_open(conn, lease)
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


class AsyncHandlerTransactions:
    """``AsyncConnection``s for async handlers' transactions, used only on the worker's event
    loop: one per transaction open at once, kept idle between them, closed by ``aclose``."""

    def __init__(self, db: Database, application_name: str) -> None:
        self._db = db
        self._application_name = application_name[:63]
        self._idle: list[psycopg.AsyncConnection[Any]] = []
        self._busy: set[psycopg.AsyncConnection[Any]] = set()
        self._closed = False
        self._complete = queries.get("job_complete_in_transaction").render(db.schema)

    @property
    def open_connections(self) -> int:
        return len(self._idle) + len(self._busy)

    async def _acquire(self) -> psycopg.AsyncConnection[Any]:
        if self._closed:
            raise LeaseLost("the worker has shut down: its leases were handed back")
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and not conn.broken:
                self._busy.add(conn)
                return conn
            await conn.close()
        with self._db.errors():
            # (autocommit: the transaction is the `conn.transaction()` block.)
            conn = await psycopg.AsyncConnection.connect(
                self._db.dsn,
                **session_kwargs(
                    self._db.dsn,
                    application_name=self._application_name,
                    pin_search_path=False,  # the handler's own SQL runs here
                ),
            )
        self._busy.add(conn)
        return conn

    async def _release(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Keep a connection that is idle and healthy; close any other (a cancelled task may
        leave one mid-transaction or mid-query: it is never used again)."""
        self._busy.discard(conn)
        clean = (
            not self._closed
            and not conn.closed
            and not conn.broken
            and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        )
        if clean:
            self._idle.append(conn)
        else:
            await conn.close()

    @contextlib.asynccontextmanager
    async def completing(
        self, lease: Lease, before_completion: Callable[[], None]
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """``HandlerTransactions.completing`` on an ``AsyncConnection``: the lease's fenced
        completion runs last in the block's transaction, which then commits; ``LeaseLost``
        (rolled back) when the fence refuses. A task cancelled inside the block rolls back
        (or, cancelled during the rollback itself, its connection is closed)."""
        conn = await self._acquire()
        params = {"id": lease.job_id, "attempt": lease.attempt, "owner": lease.owner}
        body_done = False
        try:
            async with conn.transaction():
                yield conn
                body_done = True
                _still_open(conn, lease)
                before_completion()
                cursor = await conn.execute(self._complete, params)
                if await cursor.fetchone() is None:
                    raise _Refused
        except _Refused:
            raise LeaseLost(
                f"job {lease.job_id} attempt {lease.attempt}: the lease was lost; "
                "the transaction was rolled back"
            ) from None
        except psycopg.Error as exc:
            if not body_done:
                raise  # the handler's own error, for it to see as it is
            with self._db.errors():
                raise exc from None
        finally:
            await self._release(conn)

    async def aclose(self) -> None:
        """Close the idle connections; one in use is closed when its transaction ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            await conn.close()


class TransactionEnded(Exception):
    """The handler ended ``ctx.transaction()``'s transaction itself (a raw COMMIT or ROLLBACK):
    its writes are no longer tied to the job's completion, so the job is not completed and the
    attempt fails. Writes committed by a raw COMMIT stay, even for a job that was cancelled."""


def _still_open(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], lease: Lease) -> None:
    """Before the completion: the block's transaction must still be open. (A raw COMMIT then
    a raw BEGIN is not seen: docs/design.md, "complete in the handler's transaction".)"""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.INTRANS:
        raise TransactionEnded(
            f"job {lease.job_id} attempt {lease.attempt}: the handler ended ctx.transaction()'s "
            "transaction itself (COMMIT or ROLLBACK): the job was not completed; what a COMMIT "
            "wrote stays written"
        )


class _Refused(Exception):
    """The fence refused the completion (raised inside the transaction to roll it back)."""
