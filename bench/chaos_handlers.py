"""The chaos soak's handler, run by real ``leasectl worker --handler bench.chaos_handlers:handle``
processes.

Every execution (job id, attempt, worker, start and end on the database clock) is recorded in
``chaos_executions`` through the handler's own connection, committed before the handler
returns. The payload steers it: ``ms`` of work, ``stubborn`` (ignore ``ctx.cancelled``, so only
fencing can stop the result), ``fail`` (raise on the first attempt, to exercise retries), ``tx``
(write the job's business row in ``chaos_business`` and complete the job in one transaction,
``ctx.transaction()``; a failing first attempt raises inside it, after its write).
``handle_async`` is the same as an ``async def`` handler (``python -m bench.chaos
--async-handlers``).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from leasectl.core.errors import ConnectionFailed
from leasectl.runtime.worker import AsyncJobContext, JobContext, LeaseContext

LEDGER_ENV = "LEASECTL_CHAOS_LEDGER"  # bench/failover.py's: where the ledger files go

T = TypeVar("T")


class Cancelled(Exception):
    """The lease was lost while the handler ran; the worker will not write a result."""


class Recorder:
    """A connection per handler thread; every write is idempotent (keyed by a client uuid)."""

    def __init__(self, dsn: str, schema: str, worker_id: str) -> None:
        self.dsn = dsn
        self.worker_id = worker_id
        self.insert = sql.SQL(
            "INSERT INTO {}.chaos_executions "
            "(key, job_id, attempt, worker, started_at, ended_at, outcome) "
            "VALUES (%s, %s, %s, %s, %s, clock_timestamp(), %s) ON CONFLICT (key) DO NOTHING"
        ).format(sql.Identifier(schema))
        self.business = sql.SQL(
            "INSERT INTO {}.chaos_business (job_id, attempt, worker) VALUES (%s, %s, %s)"
        ).format(sql.Identifier(schema))
        self._local = threading.local()
        self.ledger = Ledger(os.environ.get(LEDGER_ENV), worker_id)

    def _conn(self) -> psycopg.Connection[Any]:
        conn: psycopg.Connection[Any] | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                conn.close()
            conn = psycopg.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=3,
                application_name=f"chaos recorder {self.worker_id}"[:63],
            )
            self._local.conn = conn
        return conn

    def retry(
        self,
        fn: Callable[[psycopg.Connection[Any]], T],
        *,
        timeout: float,
        give_up: Callable[[], bool],
    ) -> T:
        """Run fn until it succeeds; only ever used for idempotent statements."""
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            try:
                return fn(self._conn())
            except psycopg.OperationalError as exc:
                conn = getattr(self._local, "conn", None)
                if conn is not None:
                    conn.close()
                    self._local.conn = None
                if time.monotonic() > deadline or give_up():
                    raise ConnectionFailed(f"recorder: {exc}") from None
                time.sleep(delay * (0.5 + random.random()))
                delay = min(1.0, delay * 2)

    def clock(self, give_up: Callable[[], bool]) -> Any:
        def now(conn: psycopg.Connection[Any]) -> Any:
            row = conn.execute("SELECT clock_timestamp()").fetchone()
            assert row is not None
            return row[0]

        return self.retry(now, timeout=30, give_up=give_up)

    def record(self, ctx: LeaseContext, started_at: Any, outcome: str) -> None:
        key = uuid.uuid4()
        params = (key, ctx.job.id, ctx.lease.attempt, self.worker_id, started_at, outcome)
        self.retry(lambda c: c.execute(self.insert, params), timeout=60, give_up=lambda: False)
        self.ledger.append(
            k="exec",
            key=str(key),
            job=ctx.job.id,
            attempt=ctx.lease.attempt,
            worker=self.worker_id,
            out=outcome,
        )

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()


class Ledger:
    """The handlers' own ledger, outside the database (the failover soak's, bench/failover.py):
    a line appended after the database acknowledged a write. One write(2) per line on an
    O_APPEND descriptor: no buffer for a SIGKILL to lose, no interleaving between threads."""

    def __init__(self, directory: str | None, worker_id: str) -> None:
        self.fd: int | None = None
        if directory:
            path = os.path.join(directory, f"ledger-{worker_id}.jsonl")
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, **entry: Any) -> None:
        if self.fd is not None:
            os.write(self.fd, (json.dumps(entry) + "\n").encode())


_RECORDER: Recorder | None = None
_RECORDER_LOCK = threading.Lock()


def recorder(worker_id: str) -> Recorder:
    """The process's recorder, made on first use from the worker's own environment (the soak
    passes the DSN and schema in $LEASECTL_DSN and $LEASECTL_SCHEMA, as to the worker)."""
    global _RECORDER
    with _RECORDER_LOCK:
        if _RECORDER is None:
            _RECORDER = Recorder(
                os.environ["LEASECTL_DSN"], os.environ["LEASECTL_SCHEMA"], worker_id
            )
        return _RECORDER


def handle(ctx: JobContext) -> None:
    """The soak's handler: record the execution, work ``ms``, honour or ignore cancellation."""
    rec = recorder(ctx.lease.owner)
    payload = ctx.payload if isinstance(ctx.payload, dict) else {}
    stubborn = bool(payload.get("stubborn"))
    started_at = rec.clock(give_up=lambda: ctx.cancelled.is_set() and not stubborn)
    end = time.monotonic() + float(payload.get("ms", 10)) / 1000
    cancelled = False
    while (left := end - time.monotonic()) > 0:
        if ctx.cancelled.wait(min(left, 0.02)) and not stubborn:
            cancelled = True
            break
    fail = bool(payload.get("fail")) and ctx.lease.attempt == 1
    outcome = "cancelled" if cancelled else "error" if fail else "ok"
    rec.record(ctx, started_at, outcome)
    if cancelled:
        raise Cancelled(f"job {ctx.job.id} attempt {ctx.lease.attempt}")
    if payload.get("tx"):
        with ctx.transaction() as conn:
            conn.execute(rec.business, (ctx.job.id, ctx.lease.attempt, ctx.lease.owner))
            if fail:
                raise RuntimeError("injected failure on the first attempt, inside its transaction")
        # Committed and acknowledged: the business row and the job's completion.
        rec.ledger.append(k="tx", job=ctx.job.id, attempt=ctx.lease.attempt, worker=rec.worker_id)
    if fail:
        raise RuntimeError("injected failure on the first attempt")


async def handle_async(ctx: AsyncJobContext) -> None:
    """``handle`` as an ``async def`` handler, a task of the worker's event loop: the recorder's
    blocking statements run on the loop's executor threads, the work awaits ``ctx.cancelled``
    (a stubborn one sleeps through it, until the worker cancels its task), and the business row
    and the completion commit in one ``async with ctx.transaction()``."""
    rec = recorder(ctx.lease.owner)
    payload = ctx.payload if isinstance(ctx.payload, dict) else {}
    stubborn = bool(payload.get("stubborn"))
    started_at = await asyncio.to_thread(rec.clock, lambda: ctx.cancelled.is_set() and not stubborn)
    seconds = float(payload.get("ms", 10)) / 1000
    cancelled = False
    if stubborn:
        await asyncio.sleep(seconds)
    else:
        try:
            cancelled = await asyncio.wait_for(ctx.cancelled.wait(), seconds)
        except TimeoutError:
            pass
    fail = bool(payload.get("fail")) and ctx.lease.attempt == 1
    outcome = "cancelled" if cancelled else "error" if fail else "ok"
    await asyncio.to_thread(rec.record, ctx, started_at, outcome)
    if cancelled:
        raise Cancelled(f"job {ctx.job.id} attempt {ctx.lease.attempt}")
    if payload.get("tx"):
        async with ctx.transaction() as conn:
            await conn.execute(rec.business, (ctx.job.id, ctx.lease.attempt, ctx.lease.owner))
            if fail:
                raise RuntimeError("injected failure on the first attempt, inside its transaction")
        rec.ledger.append(k="tx", job=ctx.job.id, attempt=ctx.lease.attempt, worker=rec.worker_id)
    if fail:
        raise RuntimeError("injected failure on the first attempt")
