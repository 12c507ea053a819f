"""One chaos worker process: ``python -m bench.chaos_worker DSN SCHEMA WORKER_ID [options]``.

Runs the real ``leasectl.worker.Worker`` with a handler that records every execution (job id,
attempt, worker, start and end on the database clock) in ``chaos_executions`` through its own
connection, committed before the handler returns. Prints ``ready <worker_id>`` once it works.

The payload steers the handler: ``ms`` of work, ``stubborn`` (ignore ``ctx.cancelled``, so only
fencing can stop the result), ``fail`` (raise on the first attempt, to exercise retries).
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import psycopg
from psycopg import sql

from leasectl.errors import ConnectionFailed
from leasectl.worker import JobContext, Worker, WorkerConfig

T = TypeVar("T")
log = logging.getLogger("chaos.worker")


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
        self._local = threading.local()

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

    def record(self, ctx: JobContext, started_at: Any, outcome: str) -> None:
        params = (uuid.uuid4(), ctx.job.id, ctx.lease.attempt, self.worker_id, started_at, outcome)
        self.retry(lambda c: c.execute(self.insert, params), timeout=60, give_up=lambda: False)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()


RECORDER: Recorder | None = None


def handle(ctx: JobContext) -> None:
    assert RECORDER is not None
    payload = ctx.payload if isinstance(ctx.payload, dict) else {}
    stubborn = bool(payload.get("stubborn"))
    started_at = RECORDER.clock(give_up=lambda: ctx.cancelled.is_set() and not stubborn)
    end = time.monotonic() + float(payload.get("ms", 10)) / 1000
    cancelled = False
    while (left := end - time.monotonic()) > 0:
        if ctx.cancelled.wait(min(left, 0.02)) and not stubborn:
            cancelled = True
            break
    fail = bool(payload.get("fail")) and ctx.lease.attempt == 1
    outcome = "cancelled" if cancelled else "error" if fail else "ok"
    RECORDER.record(ctx, started_at, outcome)
    if cancelled:
        raise Cancelled(f"job {ctx.job.id} attempt {ctx.lease.attempt}")
    if fail:
        raise RuntimeError("injected failure on the first attempt")


def main() -> None:
    global RECORDER
    p = argparse.ArgumentParser()
    p.add_argument("dsn")
    p.add_argument("schema")
    p.add_argument("worker_id")
    p.add_argument("--queue", default="chaos")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--ttl", type=float, default=2.0)
    p.add_argument("--heartbeat", type=float, default=0.5)
    p.add_argument("--grace", type=float, default=1.0)
    p.add_argument("--poll", type=float, default=0.1)
    a = p.parse_args()
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    logging.getLogger("psycopg").setLevel(logging.ERROR)
    RECORDER = Recorder(a.dsn, a.schema, a.worker_id)
    config = WorkerConfig(
        queues=(a.queue,),
        concurrency=a.concurrency,
        lease_ttl=timedelta(seconds=a.ttl),
        heartbeat_every=timedelta(seconds=a.heartbeat),
        grace=timedelta(seconds=a.grace),
        poll_interval=timedelta(seconds=a.poll),
        worker_id=a.worker_id,
    )
    worker = Worker(a.dsn, a.schema, config, handle)

    def announce() -> None:
        worker.started.wait()
        print(f"ready {worker.worker_id}", flush=True)

    threading.Thread(target=announce, daemon=True).start()
    delay = 0.1
    while True:
        # The server may be restarting while this worker starts: retry the start-up only.
        try:
            stats = worker.run()
            break
        except ConnectionFailed as exc:
            if worker.started.is_set():
                raise
            log.warning("chaos worker %s: cannot start yet: %s", a.worker_id, exc)
            time.sleep(delay)
            delay = min(2.0, delay * 2)
    RECORDER.close()
    print(f"stopped {stats}", flush=True)


if __name__ == "__main__":
    main()
